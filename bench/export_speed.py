"""packer export (each format) against cp -r, side by side in one run (issue 57: a disk-speed operation).

The build is repack_speed.py's: real text nobody here wrote (bench/real_corpus.py), the built-in byte
tokenizer (uint16 ids), shards of at least --min-mb. Per round: ``cp -r BUILD``, then ``packer export BUILD
DEST --format F`` for each format (a child process: start-up, imports and fsyncs included), then ``cp -r``
again (and ``cp -r`` + ``sync``, each side); each export's ratio to the mean of the two cp times (x/ that of
cp + sync), its peak RSS, and the load average beside them.
A quarter-size build is exported too: peak RSS at two build sizes shows whether memory grows with the build.

    python bench/export_speed.py --work /tmp/export_speed --min-mb 200 --rounds 2

cp writes into the page cache and returns; packer fsyncs what it writes, so the ratio includes that.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from repack_speed import make_build, run_timed, shard_mb

FORMATS = ("megatron", "olmo", "nanogpt", "mds")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/export_speed")
    ap.add_argument("--min-mb", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    big = make_build(a.work, a.min_mb, 2048, "build", 2)
    small = make_build(a.work, 0, 2048, "build-quarter", 2, fraction=0.25)
    print(f"build: {big}: {shard_mb(big):,.1f} MB of shards at seq_len 2048; {os.cpu_count()} CPUs", flush=True)
    out = os.path.join(a.work, "out")

    def fresh() -> None:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        subprocess.run(["sync"])

    def cp(sync: bool = False) -> float:
        """cp -r; with ``sync``, then sync: the copy on disk, as packer's fsyncs leave its export."""
        fresh()
        return run_timed(["sh", "-c", f"cp -r '{big}' '{out}/cp'" + (" && sync" if sync else "")])[0]

    def export(src: str, fmt: str) -> tuple[float, float]:
        fresh()
        return run_timed([sys.executable, "-m", "packer.cli", "export", src, os.path.join(out, fmt), "--format", fmt, "-q"])

    cp()  # the build in the page cache, for all
    ratios: dict[str, list[float]] = {f: [] for f in FORMATS}
    synced: dict[str, list[float]] = {f: [] for f in FORMATS}
    for r in range(a.rounds):
        load = os.getloadavg()[0]
        c1, s1, times = cp(), cp(sync=True), {f: export(big, f) for f in FORMATS}
        c2, s2 = cp(), cp(sync=True)
        line = [f"round {r}: cp {c1:.2f}/{c2:.2f}s cp+sync {s1:.2f}/{s2:.2f}s"]
        for f, (t, rss) in times.items():
            ratios[f].append(t / ((c1 + c2) / 2))
            synced[f].append(t / ((s1 + s2) / 2))
            line.append(f"{f} {t:.2f}s {ratios[f][-1]:.1f}x/{synced[f][-1]:.1f}x {rss:,.0f} MB")
        print("  ".join(line) + f"  load {load:.2f}->{os.getloadavg()[0]:.2f}", flush=True)
    quarter = {f: export(small, f)[1] for f in FORMATS}
    print(f"peak RSS, quarter-size build ({shard_mb(small):,.1f} MB): "
          + ", ".join(f"{f} {quarter[f]:,.0f} MB" for f in FORMATS))
    print("export / cp -r: " + ", ".join(f"{f} {min(v):.2f}-{max(v):.2f}x" for f, v in ratios.items())
          + f" over {a.rounds} rounds; target <= 3x")
    print("export / (cp -r + sync): " + ", ".join(f"{f} {min(v):.2f}-{max(v):.2f}x" for f, v in synced.items()))
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
