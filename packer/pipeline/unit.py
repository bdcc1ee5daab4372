"""The work unit: a deterministic function from a slice of input to a finished shard.

A unit is read in order by the main process and cut into chunks (about
PART_BYTES of raw records each); any core parses and tokenizes a chunk
(``encode_chunk``); when all chunks of a unit are back, one core packs and
writes its shard and its record (``assemble_unit``). Chunks are the grain of
parallelism, so one big unit still keeps every core busy, and the output
depends only on the units, never on which core did what. Every engine
(local processes, Ray tasks) runs these two functions.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .. import faults
from .. import shards as S
from ..formats import consumed_digest
from ..formats import Document, Part, Skip, let_go, parse_part, strict_error, where_of_record
from ..io import storage_for
from ..tokenize import Encoder, TokenizerInfo
from .chat_unit import encode_chat_chunk
from .config import OutputSettings, RunSettings
from .packed import HOLDOUT_DIR, MAX_EXAMPLES, pack_shard, shard_path  # noqa: F401 (HOLDOUT_DIR: unit.HOLDOUT_DIR)
from .plan import ChunkResult, Unit



@dataclass(frozen=True)
class Job:
    """What every unit needs: where it writes, the build's settings (as given, not copied field by
    field: a new option is read as ``job.output.<name>``), and the tokenizer as resolved. Picklable,
    sent once to each worker (a pool's initializer, one Ray object)."""

    out: str
    output: OutputSettings
    run: RunSettings
    tokenizer: TokenizerInfo
    dtype: str  # the shards' token dtype (shards.dtype_for_vocab of the tokenizer)
    chat: object = None  # a ChatJob (packer/pipeline/chat_unit.py) for a chat build, else None

    # The settings a unit's code reads most, by their short names.
    seq_len = property(lambda self: self.output.seq_len)
    pack = property(lambda self: self.output.pack)
    text_field = property(lambda self: self.output.text_field)
    holdout = property(lambda self: self.output.holdout)  # --holdout: this fraction of documents go to OUT/holdout/
    strict = property(lambda self: self.run.strict)

    @property
    def read_field(self):
        """What the readers are given as the field: the text field, or a chat build's ChatFields."""
        return self.chat.fields if self.chat is not None else self.text_field


def encoder_for(info: TokenizerInfo) -> Encoder:
    """The ``Encoder`` of ``info``, parsed once per process and tokenizer: keyed on the whole
    (frozen, hashable) ``TokenizerInfo``, so two builds in one process, or a build that falls
    back from tiktoken to HF, each get their own. A forked worker inherits the parent's entry,
    and with it the parsed tokenizer.

    The last ``info`` is looked up by identity first: an equal but distinct ``TokenizerInfo`` (the
    job's, against the one the cache was filled with) compares its tokenizer JSON, megabytes, in
    full: 0.45 ms a chunk, 1 CPU-s per GB of text (docs/benchmarks.md, "Per-chunk costs")."""
    last = _LAST_ENCODER.get("info")
    if last is info:
        return _LAST_ENCODER["encoder"]
    enc = _encoder_for(info)
    _LAST_ENCODER.update(info=info, encoder=enc)  # holds info, so an id can never be reused under it
    return enc


_LAST_ENCODER: dict = {}  # "info", "encoder": the last lookup of encoder_for in this process


@functools.lru_cache(maxsize=2)
def _encoder_for(info: TokenizerInfo) -> Encoder:
    return Encoder(info)


def _forget_encoders() -> None:
    _LAST_ENCODER.clear()
    _encoder_for.cache_clear()


encoder_for.cache_clear = _forget_encoders  # as an lru_cache's: a new process's state (tests, bench)


def encode_chunk(job: Job, unit_index: int, parts: list[Part]) -> ChunkResult:
    """Parse and tokenize one chunk of a unit (runs on any core): a function of its arguments alone."""
    with faults.in_unit(unit_index):
        return _encode_chunk(job, parts)


def _encode_chunk(job: Job, parts: list[Part]) -> ChunkResult:
    if job.chat is not None:
        res = encode_chat_chunk(job, parts)
        faults.point("tokenize")
        return res
    enc = encoder_for(job.tokenizer)
    field = tuple(job.text_field.split("."))
    texts: list[str] = []
    skipped: list[Skip] = []
    first_doc = []  # per part: the index in texts of its first document (to name a document's file:line)
    doc_record = []  # per document: its record's number in its part (where_of_record)
    for part in parts:
        first_doc.append(len(texts))
        for r, rec in enumerate(parse_part(part, field)):
            if type(rec) is Document:
                texts.append(rec.text)
                doc_record.append(r)
            elif job.strict:
                raise strict_error(rec)
            else:
                skipped.append(rec)
        let_go(part)  # a huge record's raw bytes: its str is all that is needed now
    faults.point("read")
    held = None
    at = None  # kept document -> its index among all the chunk's documents (to name its file:line)
    if job.holdout:
        keep = holdout_split(texts, job.holdout)
        at = [i for i, k in enumerate(keep) if k]
        held_texts = [t for t, k in zip(texts, keep) if not k]
        texts = [texts[i] for i in at]
        h_ids, h_lengths = _encode(enc, held_texts, job.dtype)
        held = ChunkResult(h_ids.astype(job.dtype, copy=False), h_lengths[h_lengths > 0], (), 0)
    ids, lengths = _encode(enc, texts, job.dtype)
    faults.point("tokenize")
    faults.point("slow")

    def where(d: int) -> str:
        d = at[d] if at is not None else d
        p = int(np.searchsorted(first_doc, d, side="right")) - 1
        return where_of_record(parts[p], doc_record[d])

    found = tuple((s, where(d)) for d, s in enc.specials_found(texts, ids, lengths)
                  + enc.added_found(texts, ids, lengths)) if texts else ()  # (assemble_unit tells them apart)
    if len(lengths) and lengths.min() == 0:  # encodes to nothing (only with --no-eos): cannot be placed
        for d in np.flatnonzero(lengths == 0).tolist():
            skip = Skip("no_tokens", where(d))
            if job.strict:
                raise strict_error(skip)
            skipped.append(skip)
        lengths = lengths[lengths > 0]
    return ChunkResult(ids.astype(job.dtype, copy=False), lengths, tuple(skipped), sum(p.nbytes for p in parts),
                       specials=found, held=held)


def _encode(enc: Encoder, texts: list[str], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    return enc.encode_flat(texts, dtype) if texts else (np.zeros(0, dtype), np.zeros(0, np.int64))


def holdout_split(texts: list[str], fraction: float) -> list[bool]:
    """Per text, whether it stays in the main build (True) or is held out: held out when the
    xxh3-64 hash of its UTF-8 bytes, as a fraction of 2**64, is below ``fraction``. It depends
    on the text alone, so the split is the same whatever the order, the workers or the engine,
    and equal texts always land on the same side."""
    import xxhash

    cut = int(fraction * 2**64)
    h = xxhash.xxh3_64_intdigest
    return [h(t.encode("utf-8", "surrogatepass")) >= cut for t in texts]


def holdout_out(out: str) -> str:
    """The holdout build's location inside build ``out`` (a folder or a URI prefix)."""
    return out.rstrip("/") + "/" + HOLDOUT_DIR


def assemble_unit(job: Job, unit: Unit, chunks: list[ChunkResult]) -> dict:
    """Pack one unit's documents into rows and write its shard; return its record (also on disk).

    With ``--holdout`` the unit's held-out documents become shard ``unit.index``
    of the holdout build, written first: a unit whose main record exists is
    finished in both builds (what ``--resume`` relies on).
    """
    with faults.in_unit(unit.index):
        return _assemble_unit(job, unit, chunks)


def _assemble_unit(job: Job, unit: Unit, chunks: list[ChunkResult]) -> dict:
    skipped: Counter = Counter()
    examples: dict[str, list[str]] = {}

    def skip(rec: Skip) -> None:
        if job.strict:
            raise strict_error(rec)
        skipped[rec.reason] += 1
        ex = examples.setdefault(rec.reason, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(rec.where)

    # token string -> documents whose text held it, encoded as its one id: special tokens, and the added
    # tokens that are not special (Qwen3's <think>: packer/tokenize/specials.py)
    plain = {s for _, s in job.tokenizer.plain_added}
    met: dict[str, Counter] = {"special_in_text": Counter(), "added_in_text": Counter()}
    met_examples: dict[str, dict[str, list[str]]] = {k: {} for k in met}
    met_docs: dict[str, set] = {k: set() for k in met}  # the documents (by chunk and file:line), each once
    for i, c in enumerate(chunks):
        for rec in c.skipped:
            skip(rec)
        for tok, where in c.specials:
            key = "added_in_text" if tok in plain else "special_in_text"
            met[key][tok] += 1
            met_docs[key].add((i, where))
            ex = met_examples[key].setdefault(tok, [])
            if len(ex) < MAX_EXAMPLES:
                ex.append(where)
    extra = {}
    for key, counts in met.items():  # only when met: a record without any is the record it always was
        if counts:
            extra[key] = dict(sorted(counts.items()))
            extra[key + "_examples"] = {k: met_examples[key][k] for k in sorted(met_examples[key])}
            extra[key + "_documents"] = len(met_docs[key])  # a document holding two strings counts once
    if job.holdout:
        _write_unit(job, holdout_out(job.out), unit, [c.held for c in chunks], Counter(), {}, {})
    return _write_unit(job, job.out, unit, chunks, skipped, examples, extra)


def _write_unit(job: Job, root: str, unit: Unit, chunks: list[ChunkResult], skipped: Counter, examples: dict,
                extra: dict) -> dict:
    """Pack ``chunks`` (a unit's documents, in order), write shard and record under ``root``; return the record.
    ``extra``: record keys after the usual ones (present only when they say something, so bytes stay)."""
    # (Documents that encode to nothing are already out: encode_chunk counts them as no_tokens.)
    shard = pack_shard([c.tokens for c in chunks], [c.lengths for c in chunks], job.seq_len, job.pack,
                       job.tokenizer.pad_id, job.dtype, [c.mask for c in chunks] if job.chat is not None else None)
    name = shard_path(unit.index)
    out_store = storage_for(root)
    out_store.put(name, shard.data)
    faults.point("write")

    record = shard.record(unit.index, name) | {
        "skipped": dict(sorted(skipped.items())),
        "skipped_examples": {k: examples[k] for k in sorted(examples)},
        "sources": unit_sources(unit),
    }
    if job.chat is not None:  # (only chat builds: the records of other builds keep their bytes)
        record["trained_tokens"] = shard.trained
    rows_at = shard.rows_at
    if rows_at is not None:  # where the rows lie in the shard: an object store's index.arrow is made of these
        record["layout"] = rows_at
    if rows_at is not None or job.chat is not None:  # (after "layout": the key order of 0a283c5's records, whose
        # text units all have rows) and every chat unit, also one with no rows (issue 41.1)
        record["truncated"] = sum(c.truncated for c in chunks)
    record.update(extra)
    consumed = [consumed_digest(sl) for sl in unit.slices]
    if any(d is not None for d in consumed):  # local inputs: what --resume checks (packer/formats/consumed.py)
        record["consumed"] = consumed
    out_store.put_json(f"{S.UNIT_DIR}/{unit.index:06d}.json", record)
    faults.point("kill-worker")
    return record


def unit_sources(unit: Unit) -> list[dict]:
    """What a unit record says it was made from: each slice's file and byte range (``--resume`` compares it)."""
    return [_source(sl) for sl in unit.slices]


def _source(sl) -> dict:
    src = {"path": sl.file.path, "start": sl.start, "end": sl.end}
    if sl.max_items is not None:
        src["max_items"] = sl.max_items  # --limit cut this slice short
    return src
