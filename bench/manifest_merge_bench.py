"""The serial steps of a build with many units: planning, the manifest merge, resume's scan.

Everything else in a build is per unit and runs on any core of any node;
these run once, in the driver, and grow with the number of units. Measured
on synthetic but realistically shaped unit records (1-2 input slices each,
a few skip reasons with examples, real-length paths), at 1k, 10k and 100k
units, side by side in one run:

- plan: ``plan_units`` + ``_settings`` (the input-plan hash over every slice);
- merge: ``build._manifest`` over the records (sums, skip examples, shard list);
- write: the manifest as JSON (``storage.json_bytes``, what is published:
  ``json.dumps(indent=1)``, which runs Python's pure-Python encoder), and
  for comparison ``orjson`` with indent 2 (not the published bytes: what a
  format change would buy);
- resume scan: the unit records read back from a local build folder
  (``build._finished`` per unit, what ``--resume`` does before any work).

Time (best of --repeat) and peak Python memory (tracemalloc) per step,
seconds per 1k units (so linear growth shows as a flat column), and the
ratio of each step at N units to the same step at the smallest N.

    python bench/manifest_merge_bench.py                  # 1k, 10k, 100k units
    python bench/manifest_merge_bench.py --units 1000 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import shutil
import tempfile
import time
import tracemalloc

from packer import BuildConfig
from packer import shards as S
from packer.formats import Discovery, InputFile, Slice
from packer.io import json_bytes
from packer.tokenize import resolve_tokenizer

B = importlib.import_module("packer.pipeline")  # packer.build is also the function


def synthetic(n: int):
    """n units over n/2 files of 128 MB (2 slices each, 64 MB units), and their records."""
    files = [InputFile(f"s3://corpus-bucket/common-crawl/2026-08/part-{i:06d}.jsonl", "jsonl", None, 128 << 20)
             for i in range((n + 1) // 2)]
    slices = []
    for f in files:
        slices += [(Slice(f, 0, 64 << 20), 64 << 20), (Slice(f, 64 << 20, 128 << 20), 64 << 20)]
    slices = slices[:n]
    cfg = BuildConfig.of(inputs=("s3://corpus-bucket/common-crawl/2026-08/",), out="s3://out-bucket/build")
    tok = resolve_tokenizer(None)
    records = {}
    for i in range(n):
        sl = slices[i][0]
        skipped = {"empty": i % 7, "malformed_json": i % 3} if i % 5 == 0 else {}
        records[i] = {
            "unit": i, "path": f"shards/{i:06d}.arrow", "rows": 16_200 + i % 97, "tokens": 33_000_000 + i,
            "pieces": 17_500 + i % 13, "documents": 15_000 + i % 11, "documents_split": 900 + i % 5, "padding": 1200 + i % 17,
            "bytes": 66_400_000 + i, S.CHECKSUM: f"{i * 2654435761 % (1 << 128):032x}",
            "skipped": skipped,
            "skipped_examples": {k: [f"{sl.file.path}:{j * 1000 + 1}" for j in range(min(v, 5))] for k, v in skipped.items()},
            "sources": [{"path": sl.file.path, "start": sl.start, "end": sl.end}],
        }
    return cfg, tok, files, slices, records


def measure(fn, repeat: int):
    best, peak, out = float("inf"), 0, None
    for _ in range(repeat):
        gc.collect()
        tracemalloc.start()
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        best = min(best, dt)
    return best, peak, out


def run(n: int, repeat: int, scratch: str) -> dict:
    cfg, tok, files, slices, records = synthetic(n)
    res = {}
    t, mem, units = measure(lambda: B.plan_units(slices, cfg.unit_bytes), repeat)
    t2, mem2, settings = measure(lambda: B._settings(cfg, tok, units), repeat)
    res["plan"] = (t + t2, max(mem, mem2))
    job = B.Job(cfg.out, cfg.seq_len, cfg.pack, cfg.text_field, cfg.strict, tok, "uint16")
    found = Discovery(tuple(files), (), ())
    res["merge"] = measure(lambda: B._manifest(cfg, tok, job, settings, units, records, found), repeat)[:2]
    manifest = B._manifest(cfg, tok, job, settings, units, records, found)
    t, mem, data = measure(lambda: json_bytes(manifest), repeat)
    res["write"] = (t, mem)
    res["manifest_mb"] = len(data) / 1e6
    import orjson

    res["write orjson"] = measure(lambda: orjson.dumps(manifest, option=orjson.OPT_INDENT_2), repeat)[:2]

    # Resume's scan over a local folder of n unit records (shards faked at the recorded size, sparse).
    out = os.path.join(scratch, f"b{n}")
    os.makedirs(os.path.join(out, S.UNIT_DIR))
    os.makedirs(os.path.join(out, S.SHARD_DIR))
    for i, r in records.items():
        with open(os.path.join(out, S.UNIT_DIR, f"{i:06d}.json"), "wb") as f:
            f.write(json_bytes(r))
        with open(os.path.join(out, r["path"]), "wb") as f:
            f.truncate(r["bytes"])
    res["resume scan"] = measure(lambda: sum(B._finished(out, u) is not None for u in units), repeat)[:2]
    shutil.rmtree(out)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="merge-bench-")
    try:
        results = {n: run(n, args.repeat, scratch) for n in args.units}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    n0 = args.units[0]
    print(f"{'step':<13} {'units':>8} {'seconds':>9} {'s / 1k units':>13} {'x vs ' + str(n0):>10} {'peak MB':>9}")
    for step in ("plan", "merge", "write", "write orjson", "resume scan"):
        for n in args.units:
            t, mem = results[n][step]
            print(f"{step:<13} {n:>8,} {t:>9.3f} {t / n * 1000:>13.4f} {t / results[n0][step][0]:>10.1f} {mem / 1e6:>9.1f}")
    for n in args.units:
        r = results[n]
        print(f"{n:,} units: manifest.json {r['manifest_mb']:.1f} MB; write / merge = {r['write'][0] / r['merge'][0]:.1f}; "
              f"write / write orjson = {r['write'][0] / r['write orjson'][0]:.0f}")
    print(json.dumps({str(n): {k: v if not isinstance(v, tuple) else {"s": round(v[0], 4), "peak_mb": round(v[1] / 1e6, 1)}
                               for k, v in r.items()} for n, r in results.items()}))


if __name__ == "__main__":
    main()
