"""What content stamps cost discovery: ``find`` over N small files with and without them.

    python bench/discover_stamp.py [--files 20000] [--bytes 2000] [--rounds 5] [--big-mb 0]

Makes N jsonl files of about ``--bytes`` each (and, with ``--big-mb``, one file
of that size, stamped from three 64 KiB blocks) in a temp folder, then times
``packer.io.discover.find`` over the folder, alternating: "with" is packer as
it is (stat + the content stamp's reads, packer/io/stamp.py); "without" has
``file_content`` replaced by a function returning "" (the stat alone, as
before the stamps). Files are in the page cache after the first round (a
cold network mount pays each read as a round trip: there the ratio is
larger). Prints best-of-rounds seconds and with/without as one JSON line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import emit_json  # noqa: E402

from packer.io import discover  # noqa: E402


def make(folder: str, files: int, nbytes: int, big_mb: float) -> None:
    line = b'{"text": "' + b"w" * max(1, nbytes - 13) + b'"}\n'
    for i in range(files):
        sub = os.path.join(folder, f"{i // 1000:03d}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"{i:06d}.jsonl"), "wb") as f:
            f.write(line)
    if big_mb:
        with open(os.path.join(folder, "big.jsonl"), "wb") as f:
            f.write(line * int(big_mb * (1 << 20) / len(line)))


def timed(folder: str) -> float:
    t = time.perf_counter()
    found = discover.find([folder], lambda p: p.endswith(".jsonl"), ValueError)
    assert found.files
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--bytes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--big-mb", type=float, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    real = discover.file_content
    with tempfile.TemporaryDirectory(prefix="packer-stamp-bench-") as folder:
        make(folder, a.files, a.bytes, a.big_mb)
        timed(folder)  # warm the page cache and the dentry cache
        best = {"with": float("inf"), "without": float("inf")}
        for _ in range(a.rounds):
            for side in ("without", "with"):
                discover.file_content = real if side == "with" else (lambda path, size: "")
                best[side] = min(best[side], timed(folder))
        discover.file_content = real
    emit_json({"bench": "discover_stamp", "files": a.files, "bytes": a.bytes, "big_mb": a.big_mb,
               "cores": len(os.sched_getaffinity(0)), "without_s": round(best["without"], 4),
               "with_s": round(best["with"], 4), "with/without": round(best["with"] / best["without"], 3)}, a.json)


if __name__ == "__main__":
    main()
