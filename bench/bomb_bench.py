"""Peak memory of a build reading a decompression bomb, against one reading one small record, side by side.

    python bench/bomb_bench.py [--sizes-mb 64 256 1024] [--max-record-mb 4]

For each size, a .jsonl.zst holding that many MB of NUL bytes (no newline: one
record, a few KB compressed) and one good record beside it is built with
``--workers 1 --max-record-mb M``, in a fresh process; the peak RSS of that
process (ru_maxrss, the reader runs in it) is printed next to a build of the
good record alone, and the ratio. Memory bounded by settings means the ratio
stays flat as the bomb grows. Each build also prints what it counted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import zstandard

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE = """
import json, resource, sys
from packer import build
r = build(sys.argv[1], sys.argv[2], seq_len=64, workers=1, max_record_mb=float(sys.argv[3]))
print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "skipped": r.manifest["totals"]["skipped"], "documents": r.manifest["totals"]["documents"]}))
"""


def peak(inputs: str, out: str, max_mb: float) -> dict:
    env = {**os.environ, "PYTHONPATH": HERE}
    r = subprocess.run([sys.executable, "-c", CODE, inputs, out, str(max_mb)], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--max-record-mb", type=float, default=4)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small = os.path.join(tmp, "small")
        os.makedirs(small)
        with open(os.path.join(small, "ok.jsonl"), "w") as f:
            f.write('{"text": "fine"}\n')
        base = peak(small, os.path.join(tmp, "o0"), a.max_record_mb)
        print(f"one small record: peak RSS {base['rss_mb']:.0f} MB")
        print("bomb MB | .zst bytes | peak RSS MB | vs small | skipped")
        for mb in a.sizes_mb:
            d = os.path.join(tmp, f"b{mb}")
            os.makedirs(d)
            z = zstandard.ZstdCompressor(level=3).compressobj()
            with open(os.path.join(d, "bomb.jsonl.zst"), "wb") as f:
                for _ in range(mb):
                    f.write(z.compress(b"\0" * (1 << 20)))
                f.write(z.flush())
            with open(os.path.join(d, "ok.jsonl"), "w") as f:
                f.write('{"text": "fine"}\n')
            got = peak(d, os.path.join(tmp, f"o{mb}"), a.max_record_mb)
            size = os.path.getsize(os.path.join(d, "bomb.jsonl.zst"))
            print(f"{mb:7d} | {size:10,d} | {got['rss_mb']:11.0f} | {got['rss_mb'] / base['rss_mb']:8.3f} | {got['skipped']}")


if __name__ == "__main__":
    main()
