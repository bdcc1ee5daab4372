"""packer.hf_dataset on a build, two trees side by side: time to open, random rows (with labels and
position_ids), batched iteration, and what opening writes into the datasets cache.

    python bench/hf_view.py --base /tmp/basewt --build /tmp/hfb --rounds 2

``--base``: a checkout of the other version (``git worktree add /tmp/basewt REV``); each measurement runs in a
child process with that tree first on sys.path, the two trees alternating, a fresh cache folder each time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = r"""
import os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
os.environ["HF_DATASETS_CACHE"] = cache = tempfile.mkdtemp()
from packer import hf_dataset
t = time.perf_counter(); ds = hf_dataset(sys.argv[2]); t_open = time.perf_counter() - t
t = time.perf_counter()
for i in range(0, len(ds), 3):
    r = ds[i]; r["labels"]; r["position_ids"]
t_rows = time.perf_counter() - t
t = time.perf_counter(); sum(len(b["input_ids"]) for b in ds.iter(batch_size=64)); t_iter = time.perf_counter() - t
mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs) / 1e6
print(f"open {t_open:.2f}s  rows/3 {t_rows:.2f}s  iter {t_iter:.2f}s  cache {mb:.1f} MB  ({len(ds):,} rows)")
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the other tree")
    ap.add_argument("--build", required=True, help="a finished build")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"load {os.getloadavg()[0]:.2f}")
    for r in range(a.rounds):
        for name, tree in (("base", a.base), ("new", here)):
            out = subprocess.run([sys.executable, "-c", CHILD, tree, a.build], capture_output=True, text=True, cwd="/")
            print(f"round {r} {name:<4} {(out.stdout.strip().splitlines() or [out.stderr.strip()[-200:]])[-1]}")


if __name__ == "__main__":
    main()
