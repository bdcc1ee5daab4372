"""The repack's unit of work: one shard of a source build, its documents packed again at the new length.

A deterministic function of its arguments (``repack_unit(job, unit)``), as a build's unit is: a source
build's shard N holds exactly the documents of its unit N, in order, so packing them at N tokens with the
build's own packing code (``pipeline.pack_shard``) gives the shard a fresh build at N would write, byte for
byte. Workers, resume after a kill and the Ray engine follow from it, as they do for a build.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import faults
from .. import shards as S
from ..io import storage_for
from ..pipeline import PackedShard, pack_shard, shard_path
from .source import Documents, shard_documents, shard_pieces

MAX_EXAMPLES = 5  # examples kept per skip reason


@dataclass(frozen=True)
class RepackJob:
    """What every repack unit needs; picklable, sent once to each worker."""

    out: str  # the new build (a folder or a URI prefix)
    seq_len: int  # the new row length
    pack: str  # the packing mode ("bfd" | "concat")
    pad_id: int
    dtype: str
    chat: bool  # the sources are chat builds (loss_mask): a conversation is never split
    truncate: bool  # chat builds made with --truncate: a conversation over seq_len is cut, not dropped


@dataclass(frozen=True)
class RepackUnit:
    """One source shard, to become shard ``index`` of the new build."""

    index: int
    source: str  # the source build's root
    source_seq_len: int
    entry: dict  # the source manifest's entry for the shard (path, bytes, xxh3_128, counts)

    @property
    def weight(self) -> int:
        """Bytes to read: for progress and ETA."""
        return int(self.entry["bytes"])

    def sources(self) -> list[dict]:
        """What the unit's record says it was made from (``--resume`` compares it)."""
        return [{"build": self.source, "path": self.entry["path"], S.CHECKSUM: self.entry[S.CHECKSUM]}]


def repack_unit(job: RepackJob, unit: RepackUnit) -> dict:
    """Read one source shard, pack its documents at ``job.seq_len``, write the shard and its record under
    ``job.out``; return the record (also on disk, written last: a unit with a record is finished)."""
    with faults.in_unit(unit.index):
        store = storage_for(unit.source)
        skipped, truncated = [], 0
        if job.chat:  # conversations over the new length are dropped or cut: the documents are copied out
            docs = shard_documents(store, unit.entry, unit.source_seq_len, job.dtype, True)
            docs, skipped, truncated = fit_conversations(job, unit, docs)
            lengths, tokens, masks = docs.lengths, [docs.tokens], [docs.mask]
        else:  # each new piece copied straight from the source's pieces
            p = shard_pieces(store, unit.entry, unit.source_seq_len, job.dtype, False)
            lengths, tokens, masks = p.lengths, p.tokens, None
        faults.point("read")
        faults.point("slow")  # (the signal tests' fault: 2 s a unit)
        shard = pack_shard(tokens, [lengths], job.seq_len, job.pack, job.pad_id, job.dtype, masks)
        name = shard_path(unit.index)
        out = storage_for(job.out)
        out.put(name, shard.data)
        faults.point("write")
        record = record_of(shard, unit, name, job.chat, skipped, truncated)
        out.put_json(f"{S.UNIT_DIR}/{unit.index:06d}.json", record)
        faults.point("kill-worker")
        return record


def record_of(shard: PackedShard, unit: RepackUnit, name: str, chat: bool, skipped: list[str] = (),
              truncated: int = 0) -> dict:
    """The unit record of ``shard`` (written as ``name``), as a build's unit writes it, key for key."""
    record = shard.record(unit.index, name) | {
        "skipped": {"too_long": len(skipped)} if skipped else {},
        "skipped_examples": {"too_long": list(skipped[:MAX_EXAMPLES])} if skipped else {},
        "sources": unit.sources(),
    }
    if chat:
        record["trained_tokens"] = shard.trained
    if shard.rows_at is not None:
        record["layout"] = shard.rows_at
    if shard.rows_at is not None or chat:  # (the key order of a build's records)
        record["truncated"] = truncated
    return record


def fit_conversations(job: RepackJob, unit: RepackUnit, docs: Documents) -> tuple[Documents, list[str], int]:
    """A chat build's conversations at the new length, as ``packer build --chat`` treats them: one over
    ``seq_len`` is dropped (``too_long``, counted, with where it was) or, for a build made with
    ``--truncate``, cut to its first ``seq_len`` tokens. Returns (documents, examples of those dropped, how
    many were cut). Text documents are split across rows, never dropped."""
    L = job.seq_len
    if not job.chat or not len(docs.lengths) or docs.lengths.max() <= L:
        return docs, [], 0
    over = docs.lengths > L
    starts = np.cumsum(docs.lengths) - docs.lengths
    keep_len = np.minimum(docs.lengths, L) if job.truncate else np.where(over, 0, docs.lengths)
    take = np.repeat(starts, keep_len) + (np.arange(int(keep_len.sum())) - np.repeat(np.cumsum(keep_len) - keep_len, keep_len))
    kept = Documents(docs.tokens[take], keep_len[keep_len > 0], docs.mask[take])
    if job.truncate:
        return kept, [], int(over.sum())
    where = [f"{unit.source}/{unit.entry['path']} document {d}" for d in np.flatnonzero(over).tolist()]
    return kept, where, 0


def check_unit_record(rec, unit: RepackUnit, sizes: dict) -> bool:
    """Whether ``rec`` is the finished record of ``unit`` (made from its source shard, its shard whole)."""
    try:
        return rec["unit"] == unit.index and rec["sources"] == unit.sources() and sizes.get(rec["path"]) == rec["bytes"]
    except (KeyError, TypeError):
        return False
