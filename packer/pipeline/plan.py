"""Planning a build: input slices grouped into work units, and the settings recorded.

A ``Unit`` is the unit of output: a few consecutive slices of input, about
``unit_bytes`` of it, that become one shard plus a unit record,
deterministically (a function of its input and the output settings alone).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import numpy as np

from ..io import first_change, stamp_digest
from ..formats import DEFAULT_MAX_RECORD, Document, Skip, Slice, consumed_digest, iter_parts, parse_part
from ..tokenize import TokenizerInfo
from .config import BuildConfig, text_suffixes


@dataclass(frozen=True)
class Unit:
    index: int
    slices: tuple[Slice, ...]
    weight: int  # input bytes, for progress and ETA


@dataclass(frozen=True)
class ChunkResult:
    """One chunk, tokenized: every document's ids back to back, in order."""

    tokens: np.ndarray  # (sum(lengths),) in the shard dtype, EOS included
    lengths: np.ndarray  # (documents,) int64; 0 for a document that encoded to nothing
    skipped: tuple[Skip, ...]  # records not used, in input order
    nbytes: int  # raw input bytes of the chunk
    mask: np.ndarray | None = None  # chat builds: (sum(lengths),) uint8, 1 = trained on (loss_mask)
    truncated: int = 0  # chat builds: conversations cut to seq_len (--truncate)
    specials: tuple[tuple[str, str], ...] = ()  # (token string, "file:line"): a special token's string met in a text
    held: "ChunkResult | None" = None  # --holdout: the chunk's held-out documents, tokenized the same way


def plan_units(slices: list[tuple[Slice, int]], unit_bytes: int) -> list[Unit]:
    """Group consecutive slices into units of about ``unit_bytes``."""
    units, cur, acc = [], [], 0
    for sl, w in slices:
        if cur and acc + w > unit_bytes:
            units.append(Unit(len(units), tuple(cur), acc))
            cur, acc = [], 0
        cur.append(sl)
        acc += w
    if cur:
        units.append(Unit(len(units), tuple(cur), acc))
    return units


def recorded_settings(cfg: BuildConfig, tok: TokenizerInfo, units: list[Unit], chat=None) -> dict:
    """The settings build.json and the manifest record, and ``--resume`` compares (key order is part of the bytes)."""
    o = cfg.output
    plan = hashlib.sha256()
    for u in units:
        for sl in u.slices:
            plan.update(f"{u.index}\0{sl.file.path}\0{sl.file.size}\0{sl.start}\0{sl.end}\n".encode())
    settings = {
        "seq_len": o.seq_len,
        "pack": o.pack,
        "eos": o.eos and chat is None,  # a chat build adds no EOS: its template writes the end-of-turn tokens
        "text_field": o.text_field,
        "unit_bytes": o.unit_bytes,
        "tokenizer": tok.name,
        "tokenizer_fingerprint": tok.fingerprint,
        "input_plan": plan.hexdigest(),
        # Recorded only when set: a build with the default limit has the bytes it always had.
        **({"max_record_bytes": o.max_record_bytes} if o.max_record_bytes != DEFAULT_MAX_RECORD else {}),
    }
    # Recorded only where they say something, so a build that adds EOS alone (GPT-2, bytes) keeps
    # the build.json it always had; --resume compares the keys of both sides (output.out_action).
    if tok.adds_more_than_eos():
        settings["around_text"] = {"prefix": list(tok.prefix), "suffix": list(tok.after)}
    if tok.split_special:
        settings["split_special_tokens"] = True
    if o.tokenizer_follows != "transformers":  # recorded only when not the default: other builds keep their bytes
        settings["tokenizer_follows"] = o.tokenizer_follows
    if chat is not None:  # only chat builds carry the key: other builds keep their bytes
        settings["chat"] = {
            "fields": [chat.fields.messages, chat.fields.prompt, chat.fields.completion],
            "template_source": chat.spec.source,
            "template_fingerprint": chat.spec.fingerprint(),
            "train_on": chat.spec.train_on,
            "truncate": chat.truncate,
            # The date strftime_now gives, fixed at the build's start; only for templates that read it.
            **({"date": chat.spec.date} if chat.spec.date else {}),
        }
    # Recorded only when used, so a build without them keeps its bytes.
    if o.format != "auto":
        settings["format"] = o.format
    if o.text_extensions is not None:
        settings["text_extensions"] = list(text_suffixes(o.text_extensions))
    if o.limit is not None:
        settings["limit"] = o.limit
    if o.holdout:
        settings["holdout"] = float(o.holdout)
    return settings


def input_stamp(files, content_only: bool = False) -> str:
    """A digest of every input's stamp (``packer.io.stamp``: path, size, modification time, inode and a
    hash of its content): what a same-size edit changes, even one with its time put back. Kept out of
    the recorded settings; ``--resume`` compares it with the one the killed build left in its lock
    file. ``content_only``: path, size and content alone, the same for a copy of the corpus (build.json
    records it, for a resume without the lock)."""
    return stamp_digest(files, content_only)


def input_change(previous, files, old_sources=None) -> str | None:
    """Which input changed, and how, for ``--resume``'s refusal: from the killed build's lock record
    (``previous``: its ``listing`` of input stamps), else from ``old_sources`` (a finished build's
    manifest: each shard's ``sources``; what a file's size was where its slices are byte ranges).
    None where it cannot be told."""
    said = first_change(previous.get("listing") if isinstance(previous, dict) else None, files)
    if said is not None:
        return said
    old_sources = old_sources() if callable(old_sources) else old_sources
    if not isinstance(old_sources, list):
        return None
    ends: dict[str, int] = {}
    for src in old_sources:
        if isinstance(src, dict) and isinstance(src.get("path"), str):
            ends[src["path"]] = max(ends.get(src["path"], 0), int(src.get("end", 0) or 0))
    for f in files:
        if f.path not in ends:
            return f"{f.path} is new"
        end = ends.pop(f.path)
        if f.format != "parquet" and end != f.size:  # (parquet slices are row groups, not bytes)
            return f"{f.path}: its size was {end:,} bytes, now {f.size:,}"
    return f"{next(iter(ends))} is gone" if ends else None


CHANGE_CHECK_BYTES = 256 << 20  # input read again, at most, to name the file a finished build's stamp says changed


def content_change(units: list[Unit], record) -> str | None:
    """The first input whose bytes differ from those a finished unit read (``record(unit index)``: its
    record, whose ``consumed`` hashes them), reading at most CHANGE_CHECK_BYTES of them again; None where
    none is found within it."""
    left = CHANGE_CHECK_BYTES
    for u in units:
        rec = record(u.index)
        had = rec.get("consumed") if isinstance(rec, dict) else None
        if not isinstance(had, list) or len(had) != len(u.slices):
            continue
        for sl, before in zip(u.slices, had):
            if before is None:
                continue
            left -= sl.file.size if sl.file.format != "jsonl" or sl.file.compression else sl.end - sl.start
            if left < 0:
                return None
            if consumed_digest(sl) != before:
                return sl.file.path
    return None


def limit_slices(slices: list[tuple[Slice, int]], limit: int, text_field: str) -> list[tuple[Slice, int]]:
    """The slices that hold the first ``limit`` documents, in input order; the
    last one capped (``Slice.max_items``) just after its ``limit``-th document.

    Reads the inputs in order on this thread until ``limit`` documents are
    found (reading and parsing only: no tokenizing), so the build that follows
    tokenizes no more than it keeps. The cut is found by halving within the
    one Part that holds it, whatever its format. Deterministic in the inputs.
    """
    import threading

    before = set(threading.enumerate())
    try:
        return _limit(slices, limit, text_field)
    finally:
        for t in set(threading.enumerate()) - before:  # read-ahead threads of a reader stopped early
            t.join(timeout=2.0)


def _limit(slices, limit: int, text_field: str):
    field = tuple(text_field.split("."))
    out, docs = [], 0
    for sl, w in slices:
        items = 0
        parts = iter_parts(sl, text_field)
        for part in parts:
            bare = replace(part, tail=None)
            n = _docs(bare, field)
            if docs + n >= limit:
                need = limit - docs
                lo, hi = 1, len(part.items)  # the fewest items whose parse holds ``need`` documents
                while lo < hi:
                    mid = (lo + hi) // 2
                    if _docs(replace(bare, items=part.items[:mid]), field) >= need:
                        hi = mid
                    else:
                        lo = mid + 1
                parts.close()
                out.append((replace(sl, max_items=items + lo), w))
                return out
            docs += n
            items += len(part.items)
        out.append((sl, w))
    return out


def _docs(part, field) -> int:
    return sum(1 for r in parse_part(part, field) if type(r) is Document)
