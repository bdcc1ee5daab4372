"""What blank lines cost a build, against the same bytes of records (issue 33, item 12).

    python bench/blank_lines.py [--mb 32] [--repeat 3]

Writes ``--mb`` MB of blank lines ("\\n", and a run of " \\r\\n" lines) and the
same MB of one-line JSON records (1 KB each), as .jsonl and .jsonl.bz2 (a
blank file compresses to a few KB: a small download can be a big input), and
builds each with the built-in byte tokenizer (``--workers 1``), ``--repeat``
times, round-robin. Prints the median wall seconds of each and the ratio
blank / records: blank lines hold no document, so their build should cost no
more than reading them, well under the records' build (tokenizing and packing).
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from packer import BuildConfig, build  # noqa: E402


def inputs(d: str, mb: float) -> dict[str, str]:
    n = int(mb * (1 << 20))
    blank = (b"\n" * (n // 2) + b" \r\n" * (n // 6))[:n]
    rec = json.dumps({"text": "word " * 200}).encode() + b"\n"
    records = rec * (n // len(rec))
    out = {}
    for name, data in (("blank", blank), ("records", records)):
        for ext, pack in ((".jsonl", None), (".jsonl.bz2", bz2.compress)):
            folder = os.path.join(d, name + ext)
            os.makedirs(folder)
            with open(os.path.join(folder, "a" + ext), "wb") as f:
                f.write(pack(data) if pack else data)
            out[name + ext] = folder
    return out


def timed_build(src: str, out: str) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    try:
        build(BuildConfig.of(inputs=(src,), out=out, seq_len=2048, workers=1, quiet=True))
    except Exception as e:  # a folder of blank lines holds no document: the build says so, after reading it all
        if "no document" not in str(e).lower() and "no documents" not in str(e).lower():
            raise
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="blank-lines-") as d:
        srcs = inputs(d, a.mb)
        times: dict[str, list[float]] = {k: [] for k in srcs}
        for _ in range(a.repeat):
            for k, src in srcs.items():
                times[k].append(timed_build(src, os.path.join(d, "out")))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{a.mb:g} MB each, byte tokenizer, --workers 1, median of {a.repeat}")
    for ext in (".jsonl", ".jsonl.bz2"):
        b, r = med["blank" + ext], med["records" + ext]
        print(f"{ext:<11} blank lines {b:7.2f} s   records {r:7.2f} s   blank/records {b / r:5.2f}")


if __name__ == "__main__":
    main()
