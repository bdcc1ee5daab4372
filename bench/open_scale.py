"""Opening a build of N shards: time, memory and random-row cost at 10^3 ... 10^6 shards (issue 31.1).

Builds are made WITHOUT tokenizing: one real shard (of a build made once from
sample_data, or ``--source``) is hard-linked N times into ``shards/`` (a fresh
copy becomes the link source every 60,000 links: ext4 caps an inode's links at
65,000), with a valid manifest (one entry per shard, totals summed) and the
index beside it (``packer.shards.write_manifest``). ``packer stats`` verifies
such a build: every shard is a real one.

Each figure is taken in a fresh child process (python -c), so imports are not
counted and memory is the child's own:

- ``open_s``: ``PackedDataset(out)``; ``open_us_per_shard`` = open_s / N
- ``open_rss_mib``: resident memory added by the open (peak, over the baseline after a warm-up open
  of a 2-shard build, so imports are not counted)
- ``rows_us``: 2,000 rows in PackedSampler's shuffled order, one ``ds[i]`` each,
  then the same through ``__getitems__`` in batches of 8 (what a DataLoader does);
  ``vs_one_shard`` divides by the same reads from a build of 1 shard (the same file)
- ``pickle_bytes``: the dataset as a spawned DataLoader worker receives it
- ``sampler_state_bytes``: ``len(pickle.dumps(sampler.state_dict()))``
- ``no_index_open_s``: the same open with index.arrow removed (the manifest's JSON list), up to ``--no-index-max``

Run:  python bench/open_scale.py --sizes 1000 10000 100000 [1000000] --dir /tmp/open_scale
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (tests import make_build: no bench/common here)
LINKS_PER_SOURCE = 60_000
ROWS = 2000

CHILD = r"""
import json, os, pickle, resource, sys, time
import numpy as np
from packer import PackedDataset, PackedSampler
out, rows, warm = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
w = PackedDataset(warm)  # imports and first-call costs (pyarrow.compute, ...) are not the open's
w[0], w.__getitems__([0, 1])
del w
base = rss()
t = time.perf_counter()
ds = PackedDataset(out)
open_s = time.perf_counter() - t
opened = rss() - base
s = PackedSampler(ds, seed=0)
idx = [i for _, i in zip(range(rows), iter(s))]
t = time.perf_counter()
for i in idx:
    ds[i]
one = (time.perf_counter() - t) / len(idx) * 1e6
ds2 = PackedDataset(out)
t = time.perf_counter()
for a in range(0, len(idx), 8):
    ds2.__getitems__(idx[a:a + 8])
batch = (time.perf_counter() - t) / len(idx) * 1e6
print(json.dumps({"open_s": open_s, "open_rss_mib": opened, "rows_us": one, "batch_rows_us": batch,
                  "distinct_shards": len({ds._shards.locate(i)[0] for i in idx}), "rows": len(ds),
                  "peak_rss_mib": rss(), "pickle_bytes": len(pickle.dumps(ds)),
                  "sampler_state_bytes": len(pickle.dumps(s.state_dict()))}))
"""


def source_build(path: str) -> str:
    """A small real build (sample_data, built-in byte tokenizer, seq_len 2048): made once."""
    if not os.path.exists(os.path.join(path, "manifest.json")):
        from packer import BuildConfig, build

        build(BuildConfig.of(inputs=(os.path.join(REPO, "sample_data"),), out=path, seq_len=2048, workers=1,
                             unit_bytes=256 << 10, quiet=True))
    return path


def make_build(src: str, out: str, n: int, shard: int = -1) -> str:
    """A build at ``out`` of ``n`` hard links to shard ``shard`` of build ``src``, with its manifest and index."""
    from packer import shards as S
    from packer.io import storage_for

    m = S.read_manifest(src)
    e = m["shards"][shard]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, S.SHARD_DIR))
    source = None
    width = max(6, len(str(n - 1)))
    entries = []
    for k in range(n):
        rel = f"{S.SHARD_DIR}/{k:0{width}d}.arrow"
        dst = os.path.join(out, rel)
        if k % LINKS_PER_SOURCE == 0:
            shutil.copyfile(os.path.join(src, e["path"]), dst)
            source = dst
        else:
            os.link(source, dst)
        entries.append({**e, "unit": k, "path": rel, "sources": []})
    m["shards"] = entries
    t = m["totals"]
    for key in S.manifest.COUNTS + ("trained_tokens",):
        if key in t:
            t[key] = e[key] * n
    t["slots"] = t["rows"] * m["seq_len"]
    t["padding_pct"] = round(100.0 * t["padding"] / max(1, t["slots"]), 4)
    S.write_manifest(storage_for(out), m)
    return out


def measure(out: str, warm: str, rows: int = ROWS) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    r = subprocess.run([sys.executable, "-c", CHILD, out, str(rows), warm], capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"measuring {out} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--dir", default="/tmp/open_scale", help="where the builds are made (N hard links each)")
    ap.add_argument("--source", default=None, help="a real build to take shard 0 of (default: sample_data at 2048)")
    ap.add_argument("--no-index-max", type=int, default=100_000, help="largest N also opened without its index")
    ap.add_argument("--keep", action="store_true", help="keep the builds")
    ap.add_argument("--json", default=None, help="append each result as a JSON line to this file")
    a = ap.parse_args()
    from common import emit_json

    src = a.source or source_build(os.path.join(a.dir, "source"))
    n1 = make_build(src, os.path.join(a.dir, "n1"), 1, shard=0)
    warm = make_build(src, os.path.join(a.dir, "warm"), 2, shard=0)
    one = measure(n1, warm)
    print(f"1 shard: {one['rows_us']:.1f} us/row, {one['batch_rows_us']:.1f} us/row in batches of 8", file=sys.stderr)
    results = []
    for n in a.sizes:
        t = time.perf_counter()
        out = make_build(src, os.path.join(a.dir, f"n{n}"), n, shard=0)
        made = time.perf_counter() - t
        r = measure(out, warm)
        r.update(shards=n, make_s=round(made, 1), manifest_mb=os.path.getsize(os.path.join(out, "manifest.json")) / 1e6,
                 index_mb=os.path.getsize(os.path.join(out, "index.arrow")) / 1e6,
                 open_us_per_shard=r["open_s"] / n * 1e6, vs_one_shard=r["rows_us"] / one["rows_us"],
                 batch_vs_one_shard=r["batch_rows_us"] / one["batch_rows_us"])
        if n <= a.no_index_max:
            os.rename(os.path.join(out, "index.arrow"), os.path.join(out, "index.arrow.off"))
            old = measure(out, warm, rows=200)
            os.rename(os.path.join(out, "index.arrow.off"), os.path.join(out, "index.arrow"))
            r.update(no_index_open_s=old["open_s"], no_index_open_rss_mib=old["open_rss_mib"])
        emit_json(r, a.json)
        results.append(r)
        if not a.keep:
            shutil.rmtree(out)
    print(f"{'shards':>9} {'open s':>8} {'us/shard':>9} {'open MiB':>9} {'row us':>7} {'x 1 shard':>9} "
          f"{'batch x':>8} {'no-index s':>10}", file=sys.stderr)
    for r in results:
        old = f"{r['no_index_open_s']:10.2f}" if "no_index_open_s" in r else f"{'-':>10}"
        print(f"{r['shards']:>9,} {r['open_s']:8.3f} {r['open_us_per_shard']:9.2f} {r['open_rss_mib']:9.1f} "
              f"{r['rows_us']:7.1f} {r['vs_one_shard']:9.2f} {r['batch_vs_one_shard']:8.2f} {old}", file=sys.stderr)


if __name__ == "__main__":
    main()
