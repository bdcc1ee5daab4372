"""Opening a build of N shards: time, memory and random-row cost at 10^3 ... 10^6 shards (issue 31.1).

Builds are made WITHOUT tokenizing: one real shard (of sample_data built once, or ``--source``) hard-linked
N times (a fresh copy every 60,000 links: ext4's cap is 65,000) with a valid manifest and index (the row
layout of the one file given for every link). Each figure is a fresh child process (imports not counted;
memory over a baseline taken after a warm-up open of a 2-shard build): ``open_s``, ``open_rss_mib``;
``rows_us``: 2,000 rows in a uniform shuffle (``PackedSampler(block_rows=None)``), one ``ds[i]`` each, then
in batches of 8 (the best of 3 passes, each over a fresh dataset); ``vs_one_shard``: over the same reads of
a 1-shard build (the same file), timed in turn in the same child; ``slow_*``: the row layout ignored (each shard mapped, its Arrow footer
parsed: builds whose index predates it); ``block_*``: the same reads in PackedSampler's shuffle blocks of
``--block-shards`` shards (what the default 2^20 rows gives with 64 MB shards at 2048); ``*_sampler_mib``:
peak memory of making each order; ``no_index_open_s``: index.arrow removed (up to ``--no-index-max``);
``stats_rss_mib``: peak RSS of ``packer stats OUT -q --workers W`` (``--no-verify`` past ``--stats-max``; each
W of ``--stats-workers`` in turn: ``stats_s_W_workers``).
``--sampler SHARDS ROWS``: only PackedSampler's order, at any size (no build made). ``hf_*``: ``hf_dataset(OUT)``
in a child, seconds, peak RSS and memory maps, up to ``--hf-upto`` (datasets' cache: ``--dir``/hf_cache).

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

RSS = r"""
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
"""
CHILD = RSS + r"""
import json, pickle, sys, time
import numpy as np
import packer.train.dataset as D
from packer import PackedDataset, PackedSampler
out, rows, warm, block, one = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[5]), sys.argv[6]
D.FAST = sys.argv[4] == "1"  # 0: the row layout ignored (each shard mapped, its Arrow footer parsed)
w = PackedDataset(warm)  # imports and first-call costs (pyarrow.compute, ...) are not the open's
w[0], w.__getitems__([0, 1])
del w
base, t = rss(), time.perf_counter()
ds = PackedDataset(out)
open_s, opened = time.perf_counter() - t, rss() - base
bidx = [i for _, i in zip(range(rows), iter(PackedSampler(ds, seed=0, block_rows=block * ds._shards.indexes[0].rows[0])))]
block_mib = rss() - base
s = PackedSampler(ds, seed=0, block_rows=None)
idx = [i for _, i in zip(range(rows), iter(s))]
uniform_mib = rss() - base
oidx = np.random.default_rng(0).integers(0, len(PackedDataset(one)), rows).tolist()  # the same count in one shard
def timed(path, idx, read):  # us a row over a fresh dataset (every shard's first use again)
    d, t = PackedDataset(path), time.perf_counter()
    read(d, idx)
    return (time.perf_counter() - t) / len(idx) * 1e6
def best(idx, read, key):  # the fastest of 3 passes, the build and the 1-shard build in turn: (us, ratio)
    a, b = (min(x) for x in zip(*[(timed(out, idx, read), timed(one, oidx, read)) for _ in range(3)]))
    return {f"{key}rows_us": a, f"{key}vs_one_shard": a / b}
each = lambda d, idx: all(d[i] is not None for i in idx)  # (each row dropped as it is read)
batches = lambda d, idx: all(d.__getitems__(idx[a:a + 8]) is not None for a in range(0, len(idx), 8))
print(json.dumps({"open_s": open_s, "open_rss_mib": opened, **best(idx, each, ""), **best(idx, batches, "batch_"),
                  **best(bidx, each, "block_"), **best(bidx, batches, "block_batch_"), "block_sampler_mib": block_mib,
                  "uniform_sampler_mib": uniform_mib, "block_distinct_shards": len({ds._shards.locate(i)[0] for i in bidx}),
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
    source, width, entries = None, max(6, len(str(n - 1))), []
    for k in range(n):
        rel = f"{S.SHARD_DIR}/{k:0{width}d}.arrow"
        dst = os.path.join(out, rel)
        if k % LINKS_PER_SOURCE == 0:
            source = shutil.copyfile(os.path.join(src, e["path"]), dst)
        else:
            os.link(source, dst)
        entries.append({**e, "unit": k, "path": rel, "sources": []})
    m["shards"] = entries
    layout = S.index.shard_layouts(storage_for(src), {**m, "shards": [e]})[0]  # every link's (one file's)
    t = m["totals"]
    for key in S.manifest.COUNTS + ("trained_tokens",):
        if key in t:
            t[key] = e[key] * n
    t["slots"] = t["rows"] * m["seq_len"]
    t["padding_pct"] = round(100.0 * t["padding"] / max(1, t["slots"]), 4)
    S.write_manifest(storage_for(out), m, layouts=[layout] * n)
    return out


STATS = RSS + r"""
import sys
from packer.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print(rss(), file=sys.stderr)
"""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}


def measure(out: str, warm: str, rows: int = ROWS, fast: bool = True, code: str = CHILD, args=(), block: int = 64,
            one: str = "") -> dict:
    env = _env()
    argv = [out, str(rows), warm, str(int(fast)), str(block), one or warm] if code is CHILD else list(args)
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"measuring {out} failed:\n{r.stderr}")
    return {"rss": float(r.stderr.split()[-1])} if code is STATS else json.loads(r.stdout.strip().splitlines()[-1])


HF = RSS + r"""
import json, sys, time
from packer.shards.hf_datasets import hf_dataset
t = time.perf_counter()
ds = hf_dataset(sys.argv[1])
print(json.dumps({"s": time.perf_counter() - t, "rss_mib": rss(), "maps": sum(1 for _ in open("/proc/self/maps"))}))
"""


SAMPLER = RSS + r"""
import json, sys, time
import numpy as np
from packer import PackedSampler
shards, per = int(sys.argv[1]), int(sys.argv[2])
class Build:  # what PackedSampler reads of a PackedDataset: shards of ``per`` rows
    build_rows, shard_starts = (shards * per,), np.arange(shards, dtype=np.int64) * per
base, t = rss(), time.perf_counter()
s = PackedSampler(Build(), seed=0, rank=3, world_size=512)
it = iter(s)
first = [i for _, i in zip(range(1000), it)]
made, t = time.perf_counter() - t, time.perf_counter()
n = sum(1 for _ in zip(range(4 * (1 << 20) // 512), it))  # on through about four blocks
print(json.dumps({"rows": shards * per, "first_1000_s": made, "us_per_row": (time.perf_counter() - t) / max(n, 1) * 1e6,
                  "peak_mib": rss() - base, "state": s.state_dict()}))
"""


def sampler_scale(shards: int, per: int) -> dict:
    """PackedSampler's default order over ``shards`` shards of ``per`` rows, rank 3 of 512: no build needed."""
    r = subprocess.run([sys.executable, "-c", SAMPLER, str(shards), str(per)], capture_output=True, text=True, env=_env())
    if r.returncode:
        sys.exit(f"sampler at {shards} shards failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--dir", default="/tmp/open_scale", help="where the builds are made (N hard links each)")
    ap.add_argument("--source", default=None, help="a real build to take shard 0 of (default: sample_data at 2048)")
    ap.add_argument("--no-index-max", type=int, default=100_000, help="largest N also opened without its index")
    ap.add_argument("--stats-max", type=int, default=10_000, help="largest N verified by packer stats (then --no-verify)")
    ap.add_argument("--stats-upto", type=int, default=100_000, help="largest N given to packer stats at all")
    ap.add_argument("--stats-workers", type=int, nargs="+", default=[2], help="packer stats --workers, each in turn")
    ap.add_argument("--hf-upto", type=int, default=0, help="largest N also opened by hf_dataset (twice: columns made, then read)")
    ap.add_argument("--block-shards", type=int, default=64, help="shards per shuffle block for the block_* figures")
    ap.add_argument("--sampler", type=int, nargs=2, metavar=("SHARDS", "ROWS"), default=None,
                    help="only time and size PackedSampler's order over SHARDS shards of ROWS rows (15T tokens at 2048: 470000 15500)")
    ap.add_argument("--keep", action="store_true", help="keep the builds")
    ap.add_argument("--json", default=None, help="append each result as a JSON line to this file")
    a = ap.parse_args()
    from common import emit_json

    if a.sampler:
        return emit_json(sampler_scale(*a.sampler), a.json)
    os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(a.dir, "hf_cache"))
    src = a.source or source_build(os.path.join(a.dir, "source"))
    n1, warm = (make_build(src, os.path.join(a.dir, name), k, shard=0) for name, k in (("n1", 1), ("warm", 2)))
    results = []
    for n in a.sizes:
        t, out = time.perf_counter(), make_build(src, os.path.join(a.dir, f"n{n}"), n, shard=0)
        made, r = time.perf_counter() - t, measure(out, warm, block=a.block_shards, one=n1)
        slow = measure(out, warm, fast=False, block=a.block_shards, one=n1)
        r.update(shards=n, make_s=round(made, 1), manifest_mb=os.path.getsize(os.path.join(out, "manifest.json")) / 1e6,
                 index_mb=os.path.getsize(os.path.join(out, "index.arrow")) / 1e6,
                 open_us_per_shard=r["open_s"] / n * 1e6, slow_rows_us=slow["rows_us"],
                 slow_vs_one_shard=slow["vs_one_shard"], slow_batch_vs_one_shard=slow["batch_vs_one_shard"])
        for run in ("first", "again") if n <= a.hf_upto else ():  # first: packer's columns written to the cache
            r.update({f"hf_{run}_{k}": v for k, v in measure(out, warm, code=HF, args=[out]).items()})
        if n <= a.no_index_max:
            index = os.path.join(out, "index.arrow")
            os.rename(index, index + ".off")
            old = measure(out, warm, rows=200)
            os.rename(index + ".off", index)
            r.update(no_index_open_s=old["open_s"], no_index_open_rss_mib=old["open_rss_mib"])
        for w in a.stats_workers if n <= a.stats_upto else ():
            t, flags = time.perf_counter(), ["-q", "--workers", str(w)] + (["--no-verify"] if n > a.stats_max else [])
            r.update(stats_rss_mib=measure(out, warm, code=STATS, args=["stats", out, *flags])["rss"],
                     stats_s=time.perf_counter() - t, stats_flags=" ".join(flags), **{f"stats_s_{w}_workers": time.perf_counter() - t})
        emit_json(r, a.json), results.append(r)
        if not a.keep:
            shutil.rmtree(out)
    cols = ("shards", "open_s", "open_us_per_shard", "open_rss_mib", "rows_us", "vs_one_shard", "batch_vs_one_shard",
            "slow_rows_us", "slow_vs_one_shard", "block_vs_one_shard", "block_batch_vs_one_shard", "block_sampler_mib",
            "uniform_sampler_mib", "no_index_open_s", "stats_rss_mib", "stats_s")
    print(" ".join(f"{c[:11]:>11}" for c in cols), file=sys.stderr)
    for r in results:
        print(" ".join(f"{r[c]:11.3f}" if c in r else f"{'-':>11}" for c in cols), file=sys.stderr)


if __name__ == "__main__":
    main()
