"""packer repack against cp -r, side by side in one run (issue 56: a disk-speed operation, start-up included).

Makes a build of real text nobody here wrote (bench/real_corpus.py: the standard library, man pages,
package docs, C headers) with the built-in byte tokenizer (uint16 ids, no tokenizer file), large enough
for the shards to pass --min-mb, then times, in rounds: ``cp -r BUILD``, ``packer repack BUILD --seq-len
N`` (a child process: start-up, imports and every fsync included), ``cp -r BUILD`` again. Prints each
time, the ratio repack / mean(cp before, cp after), the repack's peak RSS (its process tree's largest
process), and the machine's load average beside them. A quarter-size build is repacked too, so the peak
RSS at two build sizes shows whether memory grows with the build.

    python bench/repack_speed.py --work /tmp/rs --min-mb 200 --from-len 2048 --to-len 8192 --rounds 3

cp writes into the page cache and returns; packer fsyncs every file it writes (atomic writes: a crash
never leaves half a shard), so the ratio includes packer's durability.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB of the child and the descendants it waited for) of ``cmd``."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return dt, ru.ru_maxrss / 1024


def shard_mb(build: str) -> float:
    m = json.load(open(os.path.join(build, "manifest.json")))
    return sum(s["bytes"] for s in m["shards"]) / 1e6


def make_build(work: str, min_mb: float, seq_len: int, name: str, workers: int, fraction: float = 1.0) -> str:
    """A build of real text whose shards hold at least ``min_mb`` MB (the corpus repeated if the
    machine has less text: each copy a file of its own); ``fraction``: only that share of its documents."""
    out = os.path.join(work, name)
    if os.path.exists(os.path.join(out, "manifest.json")) and shard_mb(out) >= min_mb:
        return out
    corpus = os.path.join(work, "corpus")
    if not os.path.exists(os.path.join(corpus, "real.jsonl")):
        subprocess.run([sys.executable, os.path.join(HERE, "real_corpus.py"), corpus, "--mb", "120", "--no-txt"],
                       check=True)
    text_mb = os.path.getsize(os.path.join(corpus, "real.jsonl")) / 1e6
    copies = max(1, int(-(-min_mb * 0.55 // text_mb)))  # ~2 bytes of shard per byte of text (uint16), a margin
    inputs = os.path.join(work, f"in-{name}")
    shutil.rmtree(inputs, ignore_errors=True)
    os.makedirs(inputs)
    for i in range(copies):
        dst = os.path.join(inputs, f"part{i:02d}.jsonl")
        if fraction < 1.0:
            lines = open(os.path.join(corpus, "real.jsonl"), "rb").readlines()
            open(dst, "wb").writelines(lines[: int(len(lines) * fraction)])
        else:
            os.link(os.path.join(corpus, "real.jsonl"), dst)
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "packer.cli", "build", inputs, out, "--seq-len", str(seq_len),
                    "--workers", str(workers), "-q"], check=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/repack_speed")
    ap.add_argument("--min-mb", type=float, default=200)
    ap.add_argument("--from-len", type=int, default=2048)
    ap.add_argument("--to-len", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="repack --workers (0: one per CPU)")
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    big = make_build(a.work, a.min_mb, a.from_len, "build", 2)
    small = make_build(a.work, 0, a.from_len, "build-quarter", 2, fraction=0.25)
    mb = shard_mb(big)
    print(f"build: {big}: {mb:,.1f} MB of shards at seq_len {a.from_len}; {os.cpu_count()} CPUs", flush=True)
    cp_dst, rp_dst = os.path.join(a.work, "cp"), os.path.join(a.work, "rp")
    packer = [sys.executable, "-m", "packer.cli", "repack"]

    def cp(sync: bool = False) -> float:
        """cp -r; with ``sync``, then sync: the copy on disk, as packer's fsyncs leave its output."""
        shutil.rmtree(cp_dst, ignore_errors=True)
        subprocess.run(["sync"])
        return run_timed(["sh", "-c", f"cp -r '{big}' '{cp_dst}'" + (" && sync" if sync else "")])[0]

    def rp(src: str) -> tuple[float, float]:
        shutil.rmtree(rp_dst, ignore_errors=True)
        subprocess.run(["sync"])
        return run_timed(packer + [src, rp_dst, "--seq-len", str(a.to_len), "--workers", str(a.workers), "-q"])

    cp()  # the build in the page cache, for both
    ratios, synced = [], []
    for r in range(a.rounds):
        load = os.getloadavg()[0]
        c1, s1 = cp(), cp(sync=True)
        t, rss = rp(big)
        c2, s2 = cp(), cp(sync=True)
        ratios.append(t / ((c1 + c2) / 2))
        synced.append(t / ((s1 + s2) / 2))
        print(f"round {r}: cp {c1:.2f}/{c2:.2f}s  cp+sync {s1:.2f}/{s2:.2f}s  repack {t:.2f}s  "
              f"repack/cp {ratios[-1]:.2f}x  repack/(cp+sync) {synced[-1]:.2f}x  peak RSS {rss:,.0f} MB  "
              f"load {load:.2f}", flush=True)
    t, rss_small = rp(small)
    print(f"quarter-size build ({shard_mb(small):,.1f} MB): repack {t:.2f}s, peak RSS {rss_small:,.0f} MB "
          f"(whole build: {rss:,.0f} MB)")
    print(f"repack / cp -r: {min(ratios):.2f}-{max(ratios):.2f}x; repack / (cp -r + sync): "
          f"{min(synced):.2f}-{max(synced):.2f}x over {a.rounds} rounds; target <= 3x")
    shutil.rmtree(cp_dst, ignore_errors=True)
    shutil.rmtree(rp_dst, ignore_errors=True)


if __name__ == "__main__":
    main()
