"""The build folder: made ready (``--resume`` / ``--overwrite``), scanned for finished units, given its manifest.

The same code for a local folder and an object-store prefix: it speaks to a
``Storage`` (packer/io) by "/"-separated names.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from .. import shards as S
from ..errors import PackerError
from ..io import Storage
from ..io import LOCK_NAME
from .packed import HOLDOUT_DIR, MAX_EXAMPLES

class OutFlags(NamedTuple):
    """The two options the rules of an output folder read (``out_action``), for a caller without a build's
    ``RunSettings``: ``packer repack``."""

    resume: bool = False
    overwrite: bool = False


LIST_THREADS = 32  # unit records read at once when resuming (small GETs on an object store)


def out_action(out: str, tops: list[str], flags, settings: dict, old_build, stamps: tuple = (None, None, None),
               why=None) -> str:
    """What a build does with output location ``out``, whose top-level names are ``tops``.

    The rules of ``--resume`` and ``--overwrite`` (``flags``: a build's ``RunSettings``, or ``OutFlags``: their
    ``resume`` and ``overwrite``). Returns
    "done" (resume: a finished build with the same settings), "continue"
    (resume it), "replace" (overwrite: delete ``tops``) or "fresh";
    raises PackerError with the one-line reason otherwise. ``old_build()``
    reads the old build.json, only when needed. ``stamps``: the inputs' stamp now
    (plan.input_stamp), the one the killed build's lock file holds (None: no lock
    file, e.g. an OUT copied without its dotfiles), and the content-only stamp now
    (compared with build.json's ``inputs`` when the lock holds none). ``why()``: which input changed
    and how, for the refusal (None where it cannot be told).
    """
    said = (lambda: (why() if why is not None else None))  # asked only on a refusal
    ours = {S.MANIFEST, S.INDEX, S.BUILD_JSON, S.SHARD_DIR, S.UNIT_DIR, HOLDOUT_DIR}
    if flags.resume and "build.json" not in tops and all(t in ours or t.startswith(".tmp-") for t in tops):
        return "fresh"  # killed before build.json was written: nothing to keep, start afresh
    if not tops:
        return "fresh"
    if flags.resume:
        if "build.json" not in tops:
            raise PackerError(f"cannot resume: {out} holds no packer build (no build.json)")
        recorded = old_build()
        old = recorded["settings"]
        diff = [k for k in {**old, **settings} if old.get(k) != settings.get(k)]
        if diff:
            k = diff[0]
            what = f"{k} was {old.get(k)!r}, now {settings.get(k)!r}"
            if k == "input_plan":
                what = "input files changed" + (f": {w}" if (w := said()) else "")
            raise PackerError(f"cannot resume {out}: it was built with other settings ({what}); use --overwrite or another folder")
        if S.MANIFEST not in tops:
            now, before, content = stamps
            if before is None and content is not None and recorded.get("inputs") not in (None, content):
                before, now = recorded["inputs"], content  # no lock record: the content stamp build.json holds
            if before is not None and now != before:
                # Same sizes (the input plan matched), other content, times or inodes:
                # an edit since the kill would mix old and new text in one build.
                how = said() or "their content, modification time or inode"
                raise PackerError(f"cannot resume {out}: input files changed since the build was interrupted "
                                  f"({how}); use --overwrite or another folder")
        return "done" if S.MANIFEST in tops else "continue"
    if flags.overwrite:
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


def prepare_out(out: Storage, flags, settings: dict, stamp: str | None = None, previous: dict | None = None,
                content: str | None = None, why=None) -> bool:
    """Make ``out`` ready for the build; return True if it already holds a finished, matching build.
    ``flags``: ``resume`` and ``overwrite`` (``out_action``).

    --overwrite deletes the manifest first, so no reader sees a manifest
    without its shards; temp files of a killed build are removed.
    ``stamp``: the inputs' stamp now (plan.input_stamp); ``previous``: what
    the lock file of a killed build holds (its ``inputs`` stamp is compared);
    ``content``: the content-only stamp, recorded in build.json (``inputs``); ``why``: see ``out_action``.
    """
    tops = [t for t in out.tops() if t != LOCK_NAME]

    def old_build() -> dict:
        try:
            old = json.loads(out.read(S.BUILD_JSON))
        except (OSError, ValueError, RecursionError) as e:
            raise PackerError(f"cannot resume: {out.path(S.BUILD_JSON)} is unreadable ({e}); use --overwrite") from None
        if not isinstance(old, dict) or not isinstance(old.get("settings", {}), dict):
            raise PackerError(f"cannot resume: {out.path(S.BUILD_JSON)} holds no settings; use --overwrite")
        return {**old, "settings": old.get("settings", {})}

    before = previous.get("inputs") if isinstance(previous, dict) else None
    action = out_action(out.root, tops, flags, settings, old_build, (stamp, before, content), why)
    if action == "done":
        remove_temp_files(out)  # a kill during a last write may have left one (format.md: --resume cleans them)
        return True
    if action == "replace":
        out.check_removable(tops)  # a read-only mount or another owner: say so before deleting anything
        _clear(out, tops)
        tops = []
    elif action == "fresh" and tops:
        # Under --resume, without build.json: what is left (units, shards) was made by a build that no
        # record here names (a kill during --overwrite, or build.json removed): nothing of it can be proven
        # to come from these settings and inputs, so none of it is kept.
        _clear(out, tops)
        tops = []
    out.make_dirs([S.SHARD_DIR, S.UNIT_DIR])
    remove_temp_files(out)
    if S.BUILD_JSON not in tops:
        # "inputs": the content stamp, outside the settings (a copy of the corpus has the same), which a
        # resume compares when the lock file is gone (an OUT copied without its dotfiles).
        extra = {"inputs": content} if content is not None else {}
        out.put_json(S.BUILD_JSON, {"format": S.FORMAT_NAME, "format_version": S.FORMAT_VERSION, "settings": settings,
                                    **extra})
    return False


def _clear(out: Storage, tops: list[str]) -> None:
    """Delete ``tops``: the manifest first (no reader sees a manifest without its shards), then
    build.json (so a kill later in the deletion leaves no settings that old units could be taken for)."""
    heads = [t for t in (S.MANIFEST, S.BUILD_JSON) if t in tops]
    for t in heads:
        out.clear([t], first=t)
    rest = [t for t in tops if t not in heads]
    if rest:
        out.clear(rest, first=rest[0])


def remove_temp_files(out: Storage) -> None:
    """Delete the temp files (``.tmp-*``, at any depth) that killed writes leave: on a resume, and as a
    build finishes (a Ray worker killed mid-write leaves one, and Ray runs its unit again elsewhere)."""
    stale = [k for k in out.list() if k.rsplit("/", 1)[-1].startswith(".tmp-")]
    if stale:
        out.delete(stale)


def finished_records(out: Storage, units) -> dict[int, dict]:
    """{unit index: record} for every unit whose record and whole shard are in ``out``.

    One listing, then the records from LIST_THREADS threads: a resume over
    100k units on an object store must not pay 100k round trips in series.
    A record's ``consumed`` hashes (packer/formats/consumed.py) are checked
    against the inputs as they are now: one that differs refuses the resume,
    naming the file (its finished units would mix with units read from the
    new version).
    """
    from .unit import unit_sources  # (here: a repack, which imports this module, needs neither formats nor tokenize)

    objects = out.list()
    want = {u.index: u for u in units if f"{S.UNIT_DIR}/{u.index:06d}.json" in objects}

    def load(i: int):
        try:
            rec = json.loads(out.read(f"{S.UNIT_DIR}/{i:06d}.json"))
            # Kept only when made from this unit's input (its slices) and its shard is whole.
            if rec["unit"] == i and rec["sources"] == unit_sources(want[i]) and objects.get(rec["path"]) == rec["bytes"]:
                _check_consumed(out, want[i], rec)
                return i, rec
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return i, None

    with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="packer-resume") as pool:
        return {i: rec for i, rec in pool.map(load, want) if rec is not None}


def _check_consumed(out: Storage, unit, rec: dict) -> None:
    """Refuse the resume if an input a finished unit read is not the bytes it read (a record without
    ``consumed``, from before 41.8, is taken as it is)."""
    from ..formats import consumed_digest

    had = rec.get("consumed")
    if not isinstance(had, list) or len(had) != len(unit.slices):
        return
    for sl, before in zip(unit.slices, had):
        if before is not None and consumed_digest(sl) != before:
            raise PackerError(f"cannot resume {out.root}: {sl.file.path} changed since the build was interrupted "
                              f"(the bytes unit {unit.index} read from it differ now, at the same size and time); "
                              "use --overwrite or another folder")


def manifest(cfg, tok, job, settings: dict, units, records: dict[int, dict], found) -> dict:
    """The build's manifest, assembled from the unit records (key order is part of the bytes)."""
    special = getattr(found, "special", ())
    inputs = {"input_files": len(found.files), "input_bytes": sum(f.size for f in found.files),
              "ignored_files": len(found.ignored)}
    head = {"pad_id": tok.pad_id, "eos_id": tok.eos_id, "vocab_size": tok.vocab_size, "tokenizer": tok.manifest()}
    return manifest_of(cfg.output.seq_len, job.dtype, head, settings, [records[u.index] for u in units],
                       job.chat is not None, inputs, {"not_regular": (len(special), list(special))} if special else {})


def manifest_of(seq_len: int, dtype: str, head: dict, settings: dict, recs: list[dict], chat: bool, inputs: dict,
                more_skipped: dict | None = None) -> dict:
    """A manifest from unit records ``recs`` in unit order (a build's, or a repack's: packer/repacking/).
    ``head``: pad_id, eos_id, vocab_size, tokenizer; ``inputs``: input_files, input_bytes,
    ignored_files; ``more_skipped``: reason -> (count, examples) of records skipped outside any unit
    (FIFOs named as inputs; for a repack, what its sources skipped).
    Longer than 60 lines: the manifest's keys in their order (the order is part of the bytes).
    """
    skipped: Counter = Counter()
    examples: dict[str, list[str]] = {}
    met: dict[str, Counter] = {"special_in_text": Counter(), "added_in_text": Counter()}  # (unit.assemble_unit)
    met_examples: dict[str, dict[str, list[str]]] = {k: {} for k in met}
    met_docs = {k: 0 for k in met}
    for r in recs:
        skipped.update(r["skipped"])
        for k, v in r["skipped_examples"].items():
            ex = examples.setdefault(k, [])
            ex.extend(v[: MAX_EXAMPLES - len(ex)])
        for key, counts in met.items():
            counts.update(r.get(key, {}))
            met_docs[key] += r.get(key + "_documents", sum(r.get(key, {}).values()))  # (older records: per token)
            for k, v in r.get(key + "_examples", {}).items():
                ex = met_examples[key].setdefault(k, [])
                ex.extend(v[: MAX_EXAMPLES - len(ex)])
    for reason, (n, where) in (more_skipped or {}).items():  # FIFOs, devices, sockets named like inputs: never opened
        skipped[reason] += n
        ex = examples.setdefault(reason, [])
        ex.extend(where[: MAX_EXAMPLES - len(ex)])
    rows = sum(r["rows"] for r in recs)
    padding = sum(r["padding"] for r in recs)
    totals = {
        "documents": sum(r["documents"] for r in recs),
        "tokens": sum(r["tokens"] for r in recs),
        "rows": rows,
        "slots": rows * seq_len,
        "padding": padding,
        "padding_pct": round(100.0 * padding / max(1, rows * seq_len), 4),
        "pieces": sum(r["pieces"] for r in recs),
        "documents_split": sum(r["documents_split"] for r in recs),
        "skipped": dict(sorted(skipped.items())),
        "skipped_examples": {k: examples[k] for k in sorted(examples)},
        **inputs,
    }
    for key, counts in met.items():  # documents whose text held a special (or plain added) token's string, as its id
        if counts:
            totals[key] = dict(sorted(counts.items()))
            totals[key + "_examples"] = {k: met_examples[key][k] for k in sorted(met_examples[key])}
            totals[key + "_documents"] = met_docs[key]
    if chat:  # only chat builds: other manifests keep their bytes
        totals["trained_tokens"] = sum(r["trained_tokens"] for r in recs)
        totals["trained_pct"] = round(100.0 * totals["trained_tokens"] / max(1, totals["tokens"]), 4)
        # (0 where absent: a unit with no rows, whose record 0a283c5 wrote without it, truncated nothing)
        totals["truncated"] = sum(r.get("truncated", 0) for r in recs)
    shard_keys = ("unit", "path", "rows", "tokens", "pieces", "documents", "documents_split", "padding", "bytes", S.CHECKSUM, "sources")
    m = {
        "format": S.FORMAT_NAME,
        "format_version": S.FORMAT_VERSION,
        "seq_len": seq_len,
        "dtype": dtype,
        "pad_id": head["pad_id"],
        "eos_id": head["eos_id"],
        "vocab_size": head["vocab_size"],
        "checksum": S.CHECKSUM,
        "tokenizer": head["tokenizer"],
        "settings": settings,
        "totals": totals,
        "shards": [{k: r[k] for k in shard_keys} for r in recs],
    }
    if chat:
        m["columns"] = [S.LOSS_MASK]  # optional shard columns this build wrote
        for s, r in zip(m["shards"], recs):
            s["trained_tokens"] = r["trained_tokens"]
    return m
