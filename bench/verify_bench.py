"""How fast is ``packer stats`` verification, next to a plain sequential read of the same files?

Variants, measured side by side in every round (order shuffled per round):

- ``read``: ``readinto`` a reused 16 MB buffer, file after file: the floor any
  verifier that reads every byte has to pay;
- ``read+hash``: the same plus xxh3_128 of every block;
- ``verify``: ``packer.inspect.stats.check(out)``: checksum + Arrow parse + every
  token, padding, piece and count check;
- ``no-verify``: ``check(out, deep=False)``: the piece columns only.

each twice: *cold-ish* (every shard evicted from the page cache with
``posix_fadvise(DONTNEED)`` first; the VM's host may still cache it) and
*warm* (page-cached). Throughput is shard bytes / wall seconds; the ratio
verify/read is taken within each round, then the median over rounds.

Memory: the peak RSS of a child process verifying the build, and the same
build listed 8 times over (hard links, no extra disk): flat means constant
memory whatever the size.

    python bench/verify_bench.py                  # builds bench_out/verify/* from bench_out/real/real.jsonl once
    python bench/verify_bench.py --rounds 7 --builds bench_out/verify/gpt2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

import xxhash

from common import GPT2, REAL, need_real  # bench/common.py
from packer import BuildConfig, build
from packer import shards as S
from packer.io import atomic_write, write_json
from packer.inspect.stats import check

BLOCK = 16 << 20


def ensure_builds(root: str) -> list[str]:
    """Build the real corpus twice (GPT-2 and bytes, seq_len 2048, 16 MB units) unless already there."""
    need_real()
    outs = []
    for name, tok in (("gpt2", os.path.abspath(GPT2) if os.path.exists(GPT2) else None), ("bytes", None)):
        if name == "gpt2" and tok is None:
            print("note: no GPT-2 tokenizer at ../shared/data: skipping the gpt2 build", file=sys.stderr)
            continue
        out = os.path.join(root, name)
        if not os.path.exists(os.path.join(out, S.MANIFEST)):
            print(f"building {out} ...", file=sys.stderr)
            build(BuildConfig.of(inputs=(REAL,), out=out, seq_len=2048, tokenizer=tok, unit_bytes=16 << 20, overwrite=True))
        outs.append(out)
    return outs


def shard_files(out: str) -> list[str]:
    return [os.path.join(out, e["path"]) for e in S.read_manifest(out)["shards"]]


def evict(files) -> None:
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def plain_read(files, buf) -> None:
    mv = memoryview(buf)
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(mv):
                pass


def read_hash(files, buf) -> None:
    mv = memoryview(buf)
    for p in files:
        h = xxhash.xxh3_128()
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(mv):
                h.update(mv[:n])
        h.hexdigest()


def bench_build(out: str, rounds: int) -> dict:
    files = shard_files(out)
    size = sum(os.path.getsize(p) for p in files)
    buf = bytearray(BLOCK)
    rep = check(out)
    assert rep.ok, rep.problem_lines()
    variants = {
        "read": lambda: plain_read(files, buf),
        "read+hash": lambda: read_hash(files, buf),
        "verify": lambda: check(out),
        "no-verify": lambda: check(out, deep=False),
    }
    runs = [(name, temp) for name in variants for temp in ("cold", "warm")]
    secs: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
    cpu: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(runs)
        for name, temp in runs:
            if temp == "cold":
                evict(files)
            else:
                plain_read(files, buf)  # make sure it is cached
            t0, c0 = time.perf_counter(), time.process_time()
            variants[name]()
            secs[(name, temp)].append(time.perf_counter() - t0)
            cpu[(name, temp)].append(time.process_time() - c0)
    res = {"build": out, "shards": len(files), "bytes": size, "rounds": rounds, "gbps": {}, "ratio_to_read": {},
           "cpu_ratio_to_read": {}}
    for (name, temp), s in secs.items():
        res["gbps"][f"{name}/{temp}"] = round(size / statistics.median(s) / 1e9, 3)
    for temp in ("cold", "warm"):
        for name in ("read+hash", "verify", "no-verify"):
            per_round = [r / v for r, v in zip(secs[("read", temp)], secs[(name, temp)])]
            res["ratio_to_read"][f"{name}/{temp}"] = {
                "median": round(statistics.median(per_round), 3),
                "min": round(min(per_round), 3),
            }
            # CPU seconds of this process: robust to other jobs on a shared box, blind to I/O wait
            res["cpu_ratio_to_read"][f"{name}/{temp}"] = round(
                statistics.median(cpu[("read", temp)]) / max(1e-9, statistics.median(cpu[(name, temp)])), 3)
    return res


def scaled_copy(out: str, dst: str, k: int) -> str:
    """``out`` listed ``k`` times over: shards hard-linked, manifest entries repeated."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    os.makedirs(os.path.join(dst, S.SHARD_DIR))
    m = S.read_manifest(out)
    entries = []
    for c in range(k):
        for e in m["shards"]:
            e = dict(e, unit=len(entries), path=f"{S.SHARD_DIR}/{len(entries):06d}.arrow")
            os.link(os.path.join(out, m["shards"][len(entries) % len(m["shards"])]["path"]), os.path.join(dst, e["path"]))
            entries.append(e)
    t = m["totals"]
    for key in ("documents", "tokens", "rows", "slots", "padding", "pieces", "documents_split"):
        t[key] *= k
    m["shards"] = entries
    write_json(os.path.join(dst, S.MANIFEST), m)
    shutil.copy(os.path.join(out, "build.json"), os.path.join(dst, "build.json"))
    return dst


def peak_rss_mb(code: str) -> float:
    """Peak RSS (MB) of a fresh Python child running ``code`` (VmHWM: ru_maxrss would carry the parent's over exec)."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr)
    return float(r.stdout.strip()) / 1024


RSS = ("import packer.inspect.stats as s; {body}; "
       "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))")


def memory(out: str, k: int = 8) -> dict:
    big = scaled_copy(out, out.rstrip("/") + f"_x{k}", k)
    base = peak_rss_mb(RSS.format(body="import pyarrow as pa; pa.array([1])"))  # pyarrow's one-time ~45 MB init
    one = peak_rss_mb(RSS.format(body=f"assert s.check({out!r}).ok"))
    many = peak_rss_mb(RSS.format(body=f"assert s.check({big!r}).ok"))
    size = sum(os.path.getsize(p) for p in shard_files(out))
    shutil.rmtree(big)
    return {
        "build": out, "k": k, "bytes_1x": size, "bytes_kx": size * k,
        "rss_import_mb": round(base, 1), "rss_verify_1x_mb": round(one, 1), "rss_verify_kx_mb": round(many, 1),
        "growth_kx_over_1x": round((many - base) / max(1e-9, one - base), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--builds", nargs="*", help="finished build folders (default: build bench_out/verify/{gpt2,bytes})")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", dest="json_out", help="also write the results here")
    args = ap.parse_args()
    outs = args.builds or ensure_builds("bench_out/verify")
    results = {"speed": [], "memory": []}
    for out in outs:
        r = bench_build(out, args.rounds)
        results["speed"].append(r)
        print(f"\n{out}: {r['shards']} shards, {r['bytes'] / 1e6:.1f} MB, median of {r['rounds']} rounds")
        print(f"  {'variant':<12}{'cold GB/s':>10}{'warm GB/s':>10}{'cold / read':>13}{'warm / read':>13}{'warm, CPU':>11}")
        for name in ("read", "read+hash", "verify", "no-verify"):
            cold, warm = r["gbps"][f"{name}/cold"], r["gbps"][f"{name}/warm"]
            if name == "read":
                rc = rw = rcpu = "1"
            else:
                c, w = r["ratio_to_read"][f"{name}/cold"], r["ratio_to_read"][f"{name}/warm"]
                rc, rw = f"{c['median']:.2f} ({c['min']:.2f})", f"{w['median']:.2f} ({w['min']:.2f})"
                rcpu = f"{r['cpu_ratio_to_read'][f'{name}/warm']:.2f}"
            print(f"  {name:<12}{cold:>10.2f}{warm:>10.2f}{rc:>13}{rw:>13}{rcpu:>11}")
        print("  ratio = read time / variant time, per round: median (worst); >= 0.5 is the target for verify")
        print("  warm, CPU = the same ratio in CPU seconds of this process (medians)")
    for out in outs:
        mem = memory(out)
        results["memory"].append(mem)
        print(f"\n{out}: peak RSS verifying {mem['bytes_1x'] / 1e6:.0f} MB: {mem['rss_verify_1x_mb']:.0f} MB; "
              f"{mem['k']}x as much ({mem['bytes_kx'] / 1e6:.0f} MB): {mem['rss_verify_kx_mb']:.0f} MB "
              f"(python + packer + pyarrow initialised: {mem['rss_import_mb']:.0f} MB; above that, {mem['k']}x / 1x: {mem['growth_kx_over_1x']:.2f})")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
