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

    python bench/ray_scaling.py                               # 1 and 2 workers, GPT-2, bench_out/real/real.jsonl
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

from packer import BuildConfig, build

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2 = os.path.join(REPO, "..", "shared", "data", "gpt2-tokenizer.json")


def one(cfg: BuildConfig) -> tuple[float, list[str], int]:
    shutil.rmtree(cfg.out, ignore_errors=True)
    t = time.perf_counter()
    r = build(cfg)
    dt = time.perf_counter() - t
    return dt, [s["xxh3_128"] for s in r.manifest["shards"]], r.manifest["totals"]["tokens"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", default=os.path.join(REPO, "bench_out", "real", "real.jsonl"))
    ap.add_argument("--tokenizer", default=GPT2 if os.path.exists(GPT2) else None)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--unit-mb", type=float, default=4.0, help="units per build = input MB / this: keep it >> workers")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(REPO, "bench_out", "ray_scaling"))
    args = ap.parse_args()
    if not os.path.exists(args.input):
        sys.exit(f"no input {args.input}: make it with python bench/real_corpus.py bench_out/real --mb 60")

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

    def cfg(engine: str, n: int) -> BuildConfig:
        return BuildConfig(out=os.path.join(args.out, f"{engine}-{n}"), engine=engine, workers=n, **base)

    cold, ref, tokens = one(cfg("ray", max(args.workers)))  # fresh workers: imports, tokenizer
    best: dict[tuple[str, int], float] = {}
    for _ in range(args.repeat):
        for n in args.workers:
            for engine in ("local", "ray"):
                dt, sums, _ = one(cfg(engine, n))
                if sums != ref:
                    sys.exit(f"{engine} x{n}: shards differ from the first build")
                best[engine, n] = min(best.get((engine, n), float("inf")), dt)
    ray.shutdown()
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
    print(f"one-off: Ray start {ray_start:.1f} s; first Ray build on fresh workers {cold:.1f} s vs {warm:.1f} s warm "
          f"(x{cold / warm:.2f})")
    print(json.dumps({"input_mb": round(mb, 1), "tokens": tokens, "units": units, "rows": rows,
                      "ray_start_s": round(ray_start, 2), "ray_cold_s": round(cold, 2)}))


if __name__ == "__main__":
    main()
