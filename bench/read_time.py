"""Best-of-N time to read (I/O, cutting, parsing; no tokenizing) every record of one input file,
with whichever packer is on PYTHONPATH: run it alternately against two checkouts to compare the
readers of two versions on the same file, side by side.

    python bench/read_time.py --make /tmp/rt          # /tmp/rt/c.json and /tmp/rt/c.parquet, 12,000 records
    git worktree add /tmp/base REF
    for r in 1 2 3 4 5 6; do for p in /tmp/base .; do echo "$p $(PYTHONPATH=$p python bench/read_time.py FILE)"; done; done
"""

from __future__ import annotations

import argparse
import time

from packer.formats import discover, plan_slices, read_slice


def make(folder: str) -> None:
    """12,000 records of random words (quotes, backslashes, non-ASCII) as a .json array and a .parquet."""
    import json
    import os
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "d\u00e9lta", 'quote"s', "back\\slash", "\u4e2d\u6587"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(50, 600))) for _ in range(12000)]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "c.json"), "w") as f:
        json.dump([{"text": t} for t in texts], f)
    pq.write_table(pa.table({"text": texts}), os.path.join(folder, "c.parquet"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--make", metavar="DIR", help="write the two test files into DIR and stop")
    a = ap.parse_args(argv)
    if a.make:
        make(a.make)
        return
    if not a.file:
        ap.error("name a FILE, or --make DIR")
    slices = [s for s, _ in plan_slices(discover([a.file]).files, 1 << 40)]
    best = float("inf")
    for _ in range(a.repeat):
        t = time.perf_counter()
        for s in slices:
            for _ in read_slice(s):
                pass
        best = min(best, time.perf_counter() - t)
    print(f"{best:.4f}")


if __name__ == "__main__":
    main()
