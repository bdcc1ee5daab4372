"""Planning a build: input slices grouped into work units, the settings recorded, a sample for the engine check.

A ``Unit`` is the unit of output: a few consecutive slices of input, about
``unit_bytes`` of it, that become one shard plus a unit record,
deterministically (a function of its input and the output settings alone).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import numpy as np

from ..formats import DEFAULT_MAX_RECORD, REGISTRY, Document, Skip, Slice, iter_parts, parse_part, read_slice
from ..tokenize import TokenizerInfo
from ..tokenize.tiktoken_backend import SAMPLE_CHARS, SAMPLE_DOCS, SAMPLE_TEXT_CHARS
from .config import BuildConfig


@dataclass(frozen=True)
class FirstTask:
    """A task an engine runs before any unit is assembled: ``fn(job, *args)`` on a worker, its
    result handed to ``on_result`` in the main process (which may raise: the build then stops,
    nothing written). The build's deferred engine check is one (packer/pipeline/__init__.py)."""

    fn: object
    args: tuple
    on_result: object

    def run_here(self, job) -> None:
        """Run it in this process (an engine without a pool of its own, or nothing left to build)."""
        self.on_result(self.fn(job, *self.args))


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
    if chat is not None:  # only chat builds carry the key: other builds keep their bytes
        settings["chat"] = {
            "fields": [chat.fields.messages, chat.fields.prompt, chat.fields.completion],
            "template_source": chat.spec.source,
            "template_fingerprint": chat.spec.fingerprint(),
            "train_on": chat.spec.train_on,
            "truncate": chat.truncate,
        }
    # Recorded only when used, so a build without them keeps its bytes.
    if o.limit is not None:
        settings["limit"] = o.limit
    if o.holdout:
        settings["holdout"] = float(o.holdout)
    return settings


def input_stamp(files) -> str:
    """A digest of every input's path, size, modification time and inode
    (``packer.formats.InputFile``): what a same-size edit changes. Kept out of
    the recorded settings (a copy of the corpus has other times and inodes,
    and must build the same bytes); ``--resume`` compares it with the one
    the killed build left in its lock file."""
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.path}\0{f.size}\0{f.stamp[0]}\0{f.stamp[1]}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


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
        for t in set(threading.enumerate()) - before:  # read-ahead threads of a reader stopped early (see sample_texts)
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


def sample_texts(slices, text_field: str = "text", max_docs: int = SAMPLE_DOCS, max_chars: int = SAMPLE_CHARS,
                 max_slices: int = 64) -> list[str]:
    """Up to ``max_docs`` input texts (each cut to SAMPLE_TEXT_CHARS), a few
    from the start of each of 8 slices spread over ``slices``
    (``packer.formats.Slice``), then of the slices after the first, until
    ``max_docs``, ``max_chars`` or ``max_slices``. Bad records are passed over:
    the build reports them, with file and line."""
    return read_sample(sample_slices(list(slices), max_slices), text_field, max_docs, max_chars)


def sample_slices(slices: list, max_slices: int = 64) -> list:
    """The slices ``sample_texts`` reads, in the order it reads them: 8 spread over ``slices``, then the others."""
    n = min(8, len(slices))
    spread = sorted({round(i * (len(slices) - 1) / max(1, n - 1)) for i in range(n)})
    order = spread + sorted(set(range(len(slices))) - set(spread))
    return [slices[i] for i in order[:max_slices]]


def read_sample(ordered: list, text_field: str = "text", max_docs: int = SAMPLE_DOCS,
                max_chars: int = SAMPLE_CHARS) -> list[str]:
    """``sample_texts`` of the slices ``sample_slices`` chose (``ordered``)."""
    import threading

    before = set(threading.enumerate())
    try:
        return _sample(ordered, text_field, max_docs, max_chars)
    finally:
        # Readers stopped early leave their read-ahead threads to finish a
        # last block; wait for them, so the build finds one thread and can
        # fork its workers (see packer.pipeline.local._make_pool).
        for t in set(threading.enumerate()) - before:
            t.join(timeout=2.0)


def _sample(ordered, text_field: str, max_docs: int, max_chars: int) -> list[str]:
    per = -(-max_docs // max(1, min(8, len(ordered))))
    out: list[str] = []
    chars = 0
    for sl in ordered:
        got = 0
        head = REGISTRY[sl.file.format].head(sl, SAMPLE_TEXT_CHARS)
        if head is not None:
            if head:
                out.append(head)
                chars += len(head)
            if chars >= max_chars or len(out) >= max_docs:
                break
            continue
        it = read_slice(sl, text_field)
        try:
            for rec in it:
                if isinstance(rec, Skip):
                    continue
                out.append(rec.text[:SAMPLE_TEXT_CHARS])
                chars += len(out[-1])
                got += 1
                if got >= per or chars >= max_chars or len(out) >= max_docs:
                    break
        except Exception:  # a broken input is the build's to report, with its file and line
            pass
        finally:
            it.close()
        if chars >= max_chars or len(out) >= max_docs:
            break
    return out
