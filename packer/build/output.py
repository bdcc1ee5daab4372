"""The build folder: made ready (``--resume`` / ``--overwrite``), scanned for finished units, given its manifest.

The same code for a local folder and an object-store prefix: it speaks to a
``Storage`` (packer/io) by "/"-separated names.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from .. import shards as S
from ..errors import PackerError
from ..io import Storage
from .unit import HOLDOUT_DIR, MAX_EXAMPLES

LIST_THREADS = 32  # unit records read at once when resuming (small GETs on an object store)


def out_action(out: str, tops: list[str], cfg, settings: dict, old_settings) -> str:
    """What a build does with output location ``out``, whose top-level names are ``tops``.

    The rules of ``--resume`` and ``--overwrite``. Returns
    "done" (resume: a finished build with the same settings), "continue"
    (resume it), "replace" (overwrite: delete ``tops``) or "fresh";
    raises PackerError with the one-line reason otherwise. ``old_settings()``
    reads the settings in the old build.json, only when needed.
    """
    ours = {S.MANIFEST, S.BUILD_JSON, S.SHARD_DIR, S.UNIT_DIR, HOLDOUT_DIR}
    if cfg.run.resume and "build.json" not in tops and all(t in ours or t.startswith(".tmp-") for t in tops):
        return "fresh"  # killed before build.json was written: nothing to keep, start afresh
    if not tops:
        return "fresh"
    if cfg.run.resume:
        if "build.json" not in tops:
            raise PackerError(f"cannot resume: {out} holds no packer build (no build.json)")
        old = old_settings()
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            k = diff[0]
            what = "input files changed" if k == "input_plan" else f"{k} was {old.get(k)!r}, now {settings[k]!r}"
            raise PackerError(f"cannot resume {out}: it was built with other settings ({what}); use --overwrite or another folder")
        return "done" if S.MANIFEST in tops else "continue"
    if cfg.run.overwrite:
        foreign = [t for t in tops if t not in ours]
        if foreign:
            raise PackerError(
                f"refusing to overwrite {out}: it holds files packer did not write ({', '.join(foreign[:3])}); choose another folder"
            )
        return "replace"
    raise PackerError(f"output folder {out} is not empty: pass --resume to continue a build there, or --overwrite to replace it")


def prepare_holdout(out: Storage, settings: dict) -> None:
    """Make the holdout build's folder ready (after ``prepare_out`` made its parent ready)."""
    out.make_dirs([S.SHARD_DIR, S.UNIT_DIR])
    if S.BUILD_JSON not in out.tops():
        out.put_json(S.BUILD_JSON, {"format": S.FORMAT_NAME, "format_version": S.FORMAT_VERSION, "settings": settings})


def holdout_settings(settings: dict) -> dict:
    """The holdout build's recorded settings: the main build's, marked as its holdout split."""
    return {**settings, "split": "holdout"}


def prepare_out(out: Storage, cfg, settings: dict) -> bool:
    """Make ``out`` ready for the build; return True if it already holds a finished, matching build.

    --overwrite deletes the manifest first, so no reader sees a manifest
    without its shards; temp files of a killed build are removed.
    """
    tops = out.tops()

    def old_settings() -> dict:
        return json.loads(out.read(S.BUILD_JSON)).get("settings", {})

    action = out_action(out.root, tops, cfg, settings, old_settings)
    if action == "done":
        return True
    if action == "replace":
        out.clear(tops, first=S.MANIFEST)
        tops = []
    out.make_dirs([S.SHARD_DIR, S.UNIT_DIR])
    stale = [k for k in out.list() if k.rsplit("/", 1)[-1].startswith(".tmp-")]
    if stale:
        out.delete(stale)
    if S.BUILD_JSON not in tops:
        out.put_json(S.BUILD_JSON, {"format": S.FORMAT_NAME, "format_version": S.FORMAT_VERSION, "settings": settings})
    return False


def finished_records(out: Storage, units) -> dict[int, dict]:
    """{unit index: record} for every unit whose record and whole shard are in ``out``.

    One listing, then the records from LIST_THREADS threads: a resume over
    100k units on an object store must not pay 100k round trips in series.
    """
    objects = out.list()
    want = [u.index for u in units if f"{S.UNIT_DIR}/{u.index:06d}.json" in objects]

    def load(i: int):
        try:
            rec = json.loads(out.read(f"{S.UNIT_DIR}/{i:06d}.json"))
            if objects.get(rec["path"]) == rec["bytes"]:
                return i, rec
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return i, None

    with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="packer-resume") as pool:
        return {i: rec for i, rec in pool.map(load, want) if rec is not None}


def manifest(cfg, tok, job, settings: dict, units, records: dict[int, dict], found) -> dict:
    """The manifest, assembled from the unit records (key order is part of the bytes)."""
    recs = [records[u.index] for u in units]
    skipped: Counter = Counter()
    examples: dict[str, list[str]] = {}
    for r in recs:
        skipped.update(r["skipped"])
        for k, v in r["skipped_examples"].items():
            ex = examples.setdefault(k, [])
            ex.extend(v[: MAX_EXAMPLES - len(ex)])
    rows = sum(r["rows"] for r in recs)
    padding = sum(r["padding"] for r in recs)
    totals = {
        "documents": sum(r["documents"] for r in recs),
        "tokens": sum(r["tokens"] for r in recs),
        "rows": rows,
        "slots": rows * cfg.output.seq_len,
        "padding": padding,
        "padding_pct": round(100.0 * padding / max(1, rows * cfg.output.seq_len), 4),
        "pieces": sum(r["pieces"] for r in recs),
        "documents_split": sum(r["documents_split"] for r in recs),
        "skipped": dict(sorted(skipped.items())),
        "skipped_examples": {k: examples[k] for k in sorted(examples)},
        "input_files": len(found.files),
        "input_bytes": sum(f.size for f in found.files),
        "ignored_files": len(found.ignored),
    }
    shard_keys = ("unit", "path", "rows", "tokens", "pieces", "documents", "documents_split", "padding", "bytes", S.CHECKSUM, "sources")
    return {
        "format": S.FORMAT_NAME,
        "format_version": S.FORMAT_VERSION,
        "seq_len": cfg.output.seq_len,
        "dtype": job.dtype,
        "pad_id": tok.pad_id,
        "eos_id": tok.eos_id,
        "vocab_size": tok.vocab_size,
        "checksum": S.CHECKSUM,
        "tokenizer": tok.manifest(),
        "settings": settings,
        "totals": totals,
        "shards": [{k: r[k] for k in shard_keys} for r in recs],
    }
