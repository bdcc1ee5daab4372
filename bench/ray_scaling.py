"""--engine ray against the local engine at the same worker counts, side by side in one run.

One Ray instance on this machine (``ray.init(address="local")`` with as many
CPUs as the largest worker count, started once, its start timed apart).
For each repeat and each worker count N, in turn: a local build with
``--workers N``, then a Ray build with at most N units in flight. Same
input, same settings, fresh output folders; every build's shard checksums
must equal the first build's (the engines write the same bytes).

Printed: input tokens/s of each build (best of --repeat), the ratio
ray / local at each N, and each engine's speed-up over its own N=1; plus
the one-off costs a Ray build pays that a local one does not: Ray's start
(once per ``packer build`` without ``--ray-address``) and the first build on
fresh Ray workers (each worker process imports packer and loads the
tokenizer once; later builds on the same cluster reuse the workers).

With ``--s3`` the input is also copied to an S3-compatible server started
here on loopback (moto's server mode: a Python server, far slower than S3,
so this bounds the remote read path's cost from above), and at the largest
worker count two more variants run in each repeat: the local engine reading
s3:// and the Ray engine reading s3:// and writing to s3://.

    python bench/ray_scaling.py                               # 1 and 2 workers, GPT-2, bench_out/real/real.jsonl
    python bench/ray_scaling.py --s3                          # + s3:// input and output variants (needs moto[server])
    python bench/ray_scaling.py --workers 1 2 4 8 16 --unit-mb 16  # on a many-core host with Ray installed
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time

from common import GPT2, MAKE_REAL, REAL, REPO  # bench/common.py
from packer import BuildConfig, build



def start_s3(path: str):
    """A moto S3 server on 127.0.0.1 holding ``path`` as s3://bench-in/NAME, and an empty s3://bench-out."""
    import socket
    import subprocess

    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    c = boto3.client("s3")
    c.create_bucket(Bucket="bench-in")
    c.create_bucket(Bucket="bench-out")
    c.upload_file(path, "bench-in", os.path.basename(path))
    return proc


def delete_prefix(uri: str) -> None:
    import boto3

    bucket, prefix = uri[len("s3://"):].split("/", 1)
    c = boto3.client("s3")
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            c.delete_object(Bucket=bucket, Key=o["Key"])


def one(cfg: BuildConfig) -> tuple[float, list[str], int]:
    if not cfg.out.startswith("s3://"):
        shutil.rmtree(cfg.out, ignore_errors=True)
    t = time.perf_counter()
    r = build(cfg)
    dt = time.perf_counter() - t
    return dt, [s["xxh3_128"] for s in r.manifest["shards"]], r.manifest["totals"]["tokens"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", default=REAL)
    ap.add_argument("--tokenizer", default=GPT2 if os.path.exists(GPT2) else None)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--unit-mb", type=float, default=4.0, help="units per build = input MB / this: keep it >> workers")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(REPO, "bench_out", "ray_scaling"))
    ap.add_argument("--s3", action="store_true", help="also s3:// variants against a moto server on 127.0.0.1")
    args = ap.parse_args()
    if not os.path.exists(args.input):
        sys.exit(f"no input {args.input}: make it with {MAKE_REAL}")

    server = start_s3(args.input) if args.s3 else None  # before Ray: its workers inherit the endpoint
    import ray

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # this machine only: loopback
    t = time.perf_counter()
    ray.init(address="local", num_cpus=max(args.workers), include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING, _node_ip_address="127.0.0.1")
    ray_start = time.perf_counter() - t

    base = dict(inputs=(args.input,), seq_len=2048, tokenizer=args.tokenizer, unit_bytes=int(args.unit_mb * (1 << 20)),
                quiet=True)
    mb = os.path.getsize(args.input) / 1e6
    units = -(-os.path.getsize(args.input) // base["unit_bytes"])

    def cfg(engine: str, n: int, s3_in: bool = False, s3_out: bool = False) -> BuildConfig:
        out = f"s3://bench-out/{engine}-{n}" if s3_out else os.path.join(args.out, f"{engine}-{n}")
        inputs = ("s3://bench-in/" + os.path.basename(args.input),) if s3_in else base["inputs"]
        return BuildConfig.of(out=out, engine=engine, workers=n, **{**base, "inputs": inputs})

    cold, ref, tokens = one(cfg("ray", max(args.workers)))  # fresh workers: imports, tokenizer
    best: dict[tuple[str, int], float] = {}
    for _ in range(args.repeat):
        for n in args.workers:
            for engine in ("local", "ray"):
                dt, sums, _ = one(cfg(engine, n))
                if sums != ref:
                    sys.exit(f"{engine} x{n}: shards differ from the first build")
                best[engine, n] = min(best.get((engine, n), float("inf")), dt)
        if server is not None:
            n = max(args.workers)
            for name, c in (("local, s3 in", cfg("local", n, s3_in=True)), ("ray, s3 in+out", cfg("ray", n, True, True))):
                if c.out.startswith("s3://"):
                    delete_prefix(c.out)
                dt, sums, _ = one(c)
                if sums != ref:
                    sys.exit(f"{name}: shards differ from the first build")
                best[name, n] = min(best.get((name, n), float("inf")), dt)
    ray.shutdown()
    if server is not None:
        server.terminate()
        server.wait()
    shutil.rmtree(args.out, ignore_errors=True)

    print(f"input {mb:.1f} MB, {tokens / 1e6:.1f}M tokens, {units} units of {args.unit_mb:g} MB, tokenizer "
          f"{os.path.basename(args.tokenizer or 'bytes')}; best of {args.repeat}; all builds byte-identical")
    print(f"{'workers':>7} {'local Mtok/s':>13} {'ray Mtok/s':>11} {'ray/local':>10} {'local speed-up':>15} {'ray speed-up':>13}")
    n0 = args.workers[0]
    rows = []
    for n in args.workers:
        lo, ra = tokens / best["local", n], tokens / best["ray", n]
        print(f"{n:>7} {lo / 1e6:>13.2f} {ra / 1e6:>11.2f} {ra / lo:>10.2f} {best['local', n0] / best['local', n]:>15.2f} "
              f"{best['ray', n0] / best['ray', n]:>13.2f}")
        rows.append({"workers": n, "local_s": round(best["local", n], 3), "ray_s": round(best["ray", n], 3)})
    warm = best["ray", max(args.workers)]
    if server is not None:
        n = max(args.workers)
        for name in ("local, s3 in", "ray, s3 in+out"):
            print(f"{name} x{n}: {tokens / best[name, n] / 1e6:.2f} Mtok/s, x{best[('local' if name.startswith('local') else 'ray'), n] / best[name, n]:.2f} "
                  "of the same engine on local files")
    print(f"one-off: Ray start {ray_start:.1f} s; first Ray build on fresh workers {cold:.1f} s vs {warm:.1f} s warm "
          f"(x{cold / warm:.2f})")
    print(json.dumps({"input_mb": round(mb, 1), "tokens": tokens, "units": units, "rows": rows,
                      "ray_start_s": round(ray_start, 2), "ray_cold_s": round(cold, 2)}))


if __name__ == "__main__":
    main()
