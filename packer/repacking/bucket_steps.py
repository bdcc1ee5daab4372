"""``packer repack IN... OUT --buckets MIN:MAX``: finished builds in, length buckets out (dataset decomposition).

The steps of a repack (steps.py: open, plan, prepare, run, finish), with a unit that writes one shard per
bucket (bucket_unit.py). OUT holds one ordinary build folder per bucket (OUT/len-00256/ ... OUT/len-08192/,
each with its manifest: ``packer stats``, ``packer show`` and ``PackedDataset`` read each as a build), the
units' own records (OUT/units/), the holdout's buckets under OUT/holdout/ likewise, and OUT/buckets.json,
written last: the buckets, what was dropped (the tokens below MIN, by reason) and the sources.

``repack`` here is the package's ``repack``: with ``buckets`` it runs these steps, else steps.repack.
"""

from __future__ import annotations

import json
import time

from .. import shards as S
from ..errors import PackerError
from ..io import LOCK_NAME, storage_for
from ..pipeline import OutFlags, Progress, holdout_settings, manifest_of, prepare_out
from . import steps
from .bucket_unit import BucketJob, bucket_name, finished_bucket_unit
from .buckets import merge_dropped, parse_buckets
from .run import run_units
from .steps import RepackResult, open_sources, plan_units, recorded_settings

BUCKETS_JSON = "buckets.json"
FORMAT = "packer-buckets"


def repack(inputs, out: str, *, seq_len: int | None = None, buckets=None, **options) -> RepackResult:
    """``steps.repack`` (the documents packed again at ``seq_len``), or with ``buckets=(MIN, MAX)`` (or
    ``"256:8192"``) the documents decomposed into power-of-two buckets MIN..MAX under ``out``
    (``packer repack IN OUT --buckets 256:8192``): each bucket a build folder of rows of exactly its length,
    one piece of one document per row; the tokens below MIN are counted in OUT/buckets.json. The options
    are ``steps.repack``'s (``pack`` excepted). ``result.manifest`` is then buckets.json's content."""
    if buckets is None:
        if seq_len is None:
            raise PackerError("give --seq-len N (rows of N tokens) or --buckets MIN:MAX (power-of-two buckets)")
        return steps.repack(inputs, out, seq_len=seq_len, **options)
    if seq_len is not None or options.get("pack") is not None:
        raise PackerError("--buckets makes rows of each bucket's length: give it without --seq-len or --pack")
    summary_json = options.pop("summary_json", None)
    if summary_json:
        from ..pipeline import write_summary  # (here: it imports the input formats, which a repack needs not)
    options.pop("pack", None)
    try:
        result = _repack_buckets(inputs, str(out), parse_buckets(buckets), **options)
    except PackerError as e:
        if summary_json:
            write_summary(summary_json, {"ok": False, "out": str(out), "error": str(e)})
        raise
    if summary_json:
        write_summary(summary_json, result.plan if result.plan is not None else
                      {"ok": True, "out": str(out), "seconds": round(result.seconds, 3), "units_run": result.units_run,
                       "units_skipped": result.units_skipped, **result.manifest, "notes": result.notes})
    return result


def _repack_buckets(inputs, out: str, lo_hi: tuple[int, int], workers: int = 0, engine: str = "local",
                    ray_address: str | None = None, resume: bool = False, overwrite: bool = False,
                    dry_run: bool = False, quiet: bool = False, progress=None, vocab_size: int | None = None,
                    eos_id: int | None = None) -> RepackResult:
    t0 = time.perf_counter()
    paths = steps._check_options(inputs, 2, None, workers, engine)
    sources = open_sources(paths, out, vocab_size, eos_id)
    first = sources[0]
    units = plan_units(sources)
    held = plan_units(sources, held=True) if first.holdout is not None else []
    m = first.manifest
    job = BucketJob(out, *lo_hi, m["pad_id"], m["dtype"], first.chat)
    if dry_run:
        return RepackResult({}, time.perf_counter() - t0, 0, 0, plan={
            "dry_run": True, "buckets": job.lengths, "units": len(units), "holdout_units": len(held),
            "bytes": sum(u.weight for u in units + held), "sources": [s.root for s in sources]})
    store = storage_for(out)
    lock = store.lock()
    finished = False
    try:
        tops = [t for t in store.tops() if t != LOCK_NAME]
        if BUCKETS_JSON in tops and resume and not overwrite:
            finished = True
            return RepackResult(json.loads(store.read(BUCKETS_JSON)), time.perf_counter() - t0, 0, len(units),
                                ["repack was already complete: nothing to do"])
        if tops and overwrite:
            store.check_removable(tops)
            store.clear(tops, BUCKETS_JSON)
        elif tops and not resume:
            raise PackerError(f"output {out} is not empty: use --resume to continue a repack into it, or --overwrite")
        store.make_dirs([S.UNIT_DIR])
        counter = Progress(progress, units + held, [])
        flags = OutFlags(resume, False)
        run = dict(workers=workers, engine=engine, ray_address=ray_address, quiet=quiet, counter=counter, flags=flags)
        main, ran = _tree(sources, units, job, False, **run)
        summary = {"format": FORMAT, "min": job.lo, "max": job.hi, **main, "holdout": None,
                   "sources": [{"build": s.root, "manifest_xxh3_128": s.digest, "seq_len": s.seq_len} for s in sources]}
        if held:
            summary["holdout"], ran_held = _tree(sources, held, BucketJob(out.rstrip("/") + "/holdout", *lo_hi,
                                                 m["pad_id"], m["dtype"], first.chat), True, **run)
            ran += ran_held
        lock.check()
        store.put_json(BUCKETS_JSON, summary)
        finished = True
        return RepackResult(summary, time.perf_counter() - t0, ran, len(units) + len(held) - ran, notes(summary))
    finally:
        lock.release(finished)


def _tree(sources, units, job: BucketJob, held: bool, *, workers, engine, ray_address, quiet, counter, flags):
    """Run ``units`` into ``job.out``'s bucket folders and write each bucket's manifest; return the figures
    for buckets.json and how many units ran."""
    top = storage_for(job.out)
    top.make_dirs([S.UNIT_DIR])
    settings = {}
    for b in job.lengths:
        s = recorded_settings(sources, b, "buckets") | {"buckets": [job.lo, job.hi]}
        settings[b] = holdout_settings(s) if held else s
        prepare_out(storage_for(job.folder(b)), flags, settings[b])
    sizes = {b: storage_for(job.folder(b)).list() for b in job.lengths}
    records = {}
    for u in units:
        try:
            rec = json.loads(top.read(f"{S.UNIT_DIR}/{u.index:06d}.json"))
        except (OSError, ValueError):
            continue
        if finished_bucket_unit(rec, u, job, sizes):
            records[u.index] = rec
    todo = [u for u in units if u.index not in records]
    records.update((u.index, rec) for u, rec in run_units(todo, job, workers, engine, ray_address, quiet, counter))
    recs = [records[u.index] for u in units]
    ms = [(s.holdout if held else s).manifest for s in sources]
    head = {k: ms[0][k] for k in ("pad_id", "eos_id", "vocab_size", "tokenizer")}
    inputs = {k: sum(m["totals"].get(k, 0) for m in ms) for k in ("input_files", "input_bytes", "ignored_files")}
    out = []
    for b in job.lengths:
        m = manifest_of(b, job.dtype, head, settings[b], [r["buckets"][str(b)] for r in recs], job.chat, inputs)
        S.write_manifest(storage_for(job.folder(b)), m)
        out.append({"length": b, "path": bucket_name(b), "rows": m["totals"]["rows"], "tokens": m["totals"]["tokens"]})
    tokens = sum(r["tokens"] for r in recs)
    dropped = merge_dropped(r["dropped"] for r in recs)
    lost = sum(d["tokens"] for d in dropped.values())
    return {"documents": sum(r["documents"] for r in recs), "tokens": tokens, "kept_tokens": tokens - lost,
            "padding": 0, "dropped": dropped, "dropped_pct": round(100.0 * lost / max(1, tokens), 4),
            "buckets": out}, len(todo)


def notes(summary: dict) -> list[str]:
    """What was dropped, in words (the summary says it too)."""
    out = []
    for name, part in (("", summary), ("holdout: ", summary.get("holdout"))):
        for reason, c in (part or {}).get("dropped", {}).items():
            out.append(f"{name}{c['tokens']:,} tokens of {c['documents']:,} document(s) dropped ({reason}: "
                       f"below the shortest bucket, {summary['min']:,})")
    return out
