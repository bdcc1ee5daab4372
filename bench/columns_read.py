"""Reading a text column of an Arrow/Parquet input (formats/columns.column_records), this checkout
against a git ref, side by side in one process, round-robin::

    python bench/columns_read.py --base 94590d4 --rows 200000 --repeat 7

Prints the median seconds of each and the ratio (new / base), with and without a --max-record-mb limit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from packer.formats import columns as new  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def base_module(ref: str):
    src = subprocess.run(["git", "-C", ROOT, "show", f"{ref}:packer/formats/columns.py"], check=True,
                         capture_output=True, text=True).stdout
    m = types.ModuleType("columns_base")
    m.__package__ = "packer.formats"
    exec(compile(src, "columns_base.py", "exec"), m.__dict__)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "βeta", "gamma", "délta", "epsilon", "ζ"])
    col = pa.array([" ".join(rng.choice(words, rng.integers(20, 400))) for _ in range(a.rows)])
    mods = {"base": base_module(a.base), "new": new}
    for limit in (None, 4 << 20):
        times = {k: [] for k in mods}
        for _ in range(a.repeat):
            for k, m in mods.items():
                t0 = time.perf_counter()
                n = sum(1 for _ in m.column_records(col, "c.parquet", 0, limit))
                times[k].append(time.perf_counter() - t0)
                assert n == a.rows
        b, w = statistics.median(times["base"]), statistics.median(times["new"])
        print(f"max_record {limit}: base {b:.3f} s, new {w:.3f} s, new/base {w / b:.3f} "
              f"({a.rows:,} rows, {col.nbytes / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
