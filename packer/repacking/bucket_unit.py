"""The unit of ``packer repack --buckets``: one source shard, its documents decomposed into power-of-two pieces
(buckets.py), written as one shard in each bucket's build folder (OUT/len-00256/, OUT/len-00512/, ...).

Deterministic in its arguments, as a repack unit is. Each bucket shard and its unit record are written as a
build writes them (``pipeline.lay_out``, ``unit.record_of``); the unit's own record, OUT/units/N.json, is
written last: it holds every bucket's record and what the unit dropped, and a unit with it is finished.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import faults
from .. import shards as S
from ..io import storage_for
from ..pack import Layout
from ..pipeline import lay_out, shard_path
from .buckets import bucket_lengths, decompose, spans
from .source import shard_documents
from .unit import RepackUnit, record_of


@dataclass(frozen=True)
class BucketJob:
    """What every bucket unit needs; picklable."""

    out: str  # OUT (the buckets' parent)
    lo: int  # the shortest bucket (MIN)
    hi: int  # the longest bucket (MAX)
    pad_id: int
    dtype: str
    chat: bool  # the loss mask travels with its tokens

    @property
    def lengths(self) -> list[int]:
        return bucket_lengths(self.lo, self.hi)

    def folder(self, length: int) -> str:
        """The build folder of one bucket."""
        return f"{self.out.rstrip('/')}/{bucket_name(length)}"


def bucket_name(length: int) -> str:
    return f"len-{length:05d}"


def bucket_unit(job: BucketJob, unit: RepackUnit) -> dict:
    """Decompose one source shard's documents; write its shard in every bucket, then the unit's record."""
    with faults.in_unit(unit.index):
        docs = shard_documents(storage_for(unit.source), unit.entry, unit.source_seq_len, job.dtype, job.chat)
        faults.point("read")
        pieces, dropped = decompose(docs.lengths, job.lo, job.hi)
        starts = np.cumsum(docs.lengths) - docs.lengths
        name = shard_path(unit.index)
        records = {}
        for b in job.lengths:
            doc, off = pieces.of(b)
            source, start, run, which = spans(doc, off, b)
            p = len(doc)
            layout = Layout(row=np.arange(p, dtype=np.int64), doc=which, offset=off - start[which],
                            length=np.full(p, b, np.int64), num_rows=p, seq_len=b)
            shard = lay_out([docs.tokens], np.zeros(len(source), np.int64), starts[source] + start, run, layout,
                            job.pad_id, job.dtype, [docs.mask] if job.chat else None)
            store = storage_for(job.folder(b))
            store.put(name, shard.data)
            records[str(b)] = record_of(shard, unit, name, job.chat)
            store.put_json(f"{S.UNIT_DIR}/{unit.index:06d}.json", records[str(b)])
        faults.point("write")
        record = {"unit": unit.index, "documents": int(len(docs.lengths)), "tokens": int(docs.lengths.sum()),
                  "dropped": dropped, "buckets": records, "sources": unit.sources()}
        storage_for(job.out).put_json(f"{S.UNIT_DIR}/{unit.index:06d}.json", record)
        faults.point("kill-worker")
        return record


def finished_bucket_unit(rec, unit: RepackUnit, job: BucketJob, sizes: dict[int, dict]) -> bool:
    """Whether ``rec`` is the finished record of ``unit``: made from its source shard, every bucket's shard
    whole (``sizes``: each bucket's {file: bytes})."""
    try:
        return (rec["unit"] == unit.index and rec["sources"] == unit.sources()
                and all(sizes[b].get(rec["buckets"][str(b)]["path"]) == rec["buckets"][str(b)]["bytes"]
                        for b in job.lengths))
    except (KeyError, TypeError):
        return False
