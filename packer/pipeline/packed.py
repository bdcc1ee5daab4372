"""The packing half of a work unit: documents (tokens back to back, and their lengths) to one finished
shard's bytes. What ``unit.assemble_unit`` writes for a build, and what ``packer repack`` writes from
the documents of a finished build (packer/repacking/): one function, so a repack to N gives the bytes a
fresh build at N gives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import faults
from .. import shards as S
from ..pack import Layout, pack


MAX_EXAMPLES = 5  # file:line examples kept per skip reason (unit records, manifests)
HOLDOUT_DIR = "holdout"  # a build's holdout build, inside it


@dataclass(frozen=True)
class Scattered:
    """Documents whose tokens lie in runs across several arrays, as a finished shard's pieces do
    (packer/repacking/source.py): run k is ``flat[chunk[k]][start[k] : start[k] + length[k]]``; the runs,
    in order, hold the documents back to back. ``pack_shard`` copies each new piece straight from its
    runs, with no copy of the documents in between."""

    flat: list  # (n,) arrays: the sources' tokens (or loss masks)
    chunk: np.ndarray  # (runs,) int64
    start: np.ndarray  # (runs,) int64
    length: np.ndarray  # (runs,) int64


@dataclass(frozen=True)
class PackedShard:
    """One shard, packed and laid out as Arrow IPC bytes (not yet written)."""

    data: object  # pa.Buffer: the whole file
    layout: Layout  # where every piece lies (rows, slots)
    lengths: np.ndarray  # (documents,) int64: token count of each document packed
    trained: int | None  # chat builds: slots trained on (sum of the loss mask); else None
    rows_at: dict | None  # the shard's row layout as a unit record holds it (shards.layout.to_record)

    def record(self, unit: int, path: str) -> dict:
        """The counts a unit record (and a manifest's shard entry) starts with, in their order."""
        lay = self.layout
        per_doc = np.bincount(lay.doc, minlength=len(self.lengths)) if len(self.lengths) else np.zeros(0)
        return {
            "unit": unit,
            "path": path,
            "rows": lay.num_rows,
            "tokens": int(self.lengths.sum()),
            "pieces": int(len(lay.length)),
            "documents": int(len(self.lengths)),
            "documents_split": int((per_doc > 1).sum()),
            "padding": int(lay.padding),
            "bytes": len(self.data),
            S.CHECKSUM: S.checksum(self.data),
        }


def shard_path(unit: int) -> str:
    """A unit's shard, relative to its build folder."""
    return f"{S.SHARD_DIR}/{unit:06d}.arrow"


def pack_shard(tokens: "list[np.ndarray] | Scattered", lengths: list[np.ndarray], seq_len: int, mode: str,
               pad_id: int, dtype: str, masks: "list[np.ndarray] | Scattered | None" = None) -> PackedShard:
    """Pack documents into rows of ``seq_len`` and lay the shard out.

    ``tokens[c]`` holds chunk c's documents back to back (the shard dtype), ``lengths[c]`` their token
    counts (each >= 1), in document order: a shard's documents are numbered in that order
    (``doc_index``). Or ``tokens`` is a ``Scattered`` holding all of them (``lengths``: one array).
    ``masks`` (chat builds): per chunk, the loss mask of each token (uint8), moved with its token,
    slot for slot; padding is not trained on.
    """
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    doc_chunk = np.repeat(np.arange(len(lengths)), [len(x) for x in lengths])
    doc_start = np.concatenate([np.cumsum(x) - x for x in lengths]) if lengths else all_lengths
    layout = pack(all_lengths, seq_len, mode)
    faults.point("pack")
    return lay_out(tokens, doc_chunk, doc_start, all_lengths, layout, pad_id, dtype, masks)


def lay_out(tokens: "list[np.ndarray] | Scattered", doc_chunk: np.ndarray, doc_start: np.ndarray,
            lengths: np.ndarray, layout: Layout, pad_id: int, dtype: str,
            masks: "list[np.ndarray] | Scattered | None" = None) -> PackedShard:
    """A shard's bytes from a ``layout`` made already: document d (of ``lengths[d]`` tokens) starts at
    ``doc_start[d]`` in ``tokens[doc_chunk[d]]`` (as ``gather`` reads them), or at ``doc_start[d]`` among the
    documents a ``Scattered`` holds back to back. ``pack_shard``'s second half; ``packer repack --buckets``
    lays out its power-of-two pieces with it."""
    seq_len = layout.seq_len
    if isinstance(tokens, Scattered):
        out = gather_scattered(tokens, doc_start, layout, pad_id, dtype)
        mask = None if masks is None else gather_scattered(masks, doc_start, layout, 0, "uint8")
    else:
        out = gather(tokens, doc_chunk, doc_start, layout, pad_id, dtype)
        mask = None if masks is None else gather(masks, doc_chunk, doc_start, layout, 0, "uint8")
    table = S.shard_table(out, seq_len, layout.row, layout.length, layout.doc, layout.offset, layout.num_rows,
                          loss_mask=mask)
    data = S.table_bytes(table)
    del out, table
    rows_at = S.layout.to_record(S.layout.shard_layout(data, layout.num_rows, seq_len, dtype, masks is not None))
    trained = None if mask is None else int(mask.sum(dtype=np.int64))
    return PackedShard(data, layout, lengths, trained, rows_at)


def gather(tokens: list[np.ndarray], doc_chunk: np.ndarray, doc_start: np.ndarray, layout: Layout, fill: int,
           dtype: str) -> np.ndarray:
    """Copy every piece's tokens to its slots; returns (rows * seq_len,) of ``dtype``, ``fill`` elsewhere.

    ``tokens`` holds each chunk's tokens; document d starts at ``doc_start[d]`` in
    ``tokens[doc_chunk[d]]``. One slice copy per piece: pieces are runs of hundreds of tokens on real
    text, so this moves memory at memcpy speed, where per-token fancy indexing built three int64 index
    arrays the size of the unit.
    """
    seq_len = layout.seq_len
    out = np.full(layout.num_rows * seq_len, fill, dtype=dtype)
    if not len(layout.doc):
        return out
    chunk = doc_chunk[layout.doc].tolist()
    src = (doc_start[layout.doc] + layout.offset).tolist()
    dst = (layout.row * seq_len + layout.slot).tolist()
    for c, s, d, n in zip(chunk, src, dst, layout.length.tolist()):
        out[d : d + n] = tokens[c][s : s + n]
    return out


def gather_scattered(src: Scattered, doc_start: np.ndarray, layout: Layout, fill: int, dtype: str) -> np.ndarray:
    """``gather`` from a ``Scattered``: each new piece cut where the runs it spans meet (one slice copy
    per part; a piece within one run, the common case, is one copy)."""
    L = layout.seq_len
    out = np.full(layout.num_rows * L, fill, dtype=dtype)
    if not len(layout.doc):
        return out
    run_end = np.cumsum(src.length)
    run_at = run_end - src.length  # where each run starts among the documents laid back to back
    a = doc_start[layout.doc] + layout.offset  # each new piece's span there
    b = a + layout.length
    first = np.searchsorted(run_end, a, side="right")
    last = np.searchsorted(run_at, b, side="left")  # runs first..last-1 overlap the piece
    parts = last - first
    piece = np.repeat(np.arange(len(a)), parts)
    run = np.repeat(first, parts) + (np.arange(int(parts.sum())) - np.repeat(np.cumsum(parts) - parts, parts))
    lo = np.maximum(a[piece], run_at[run])
    hi = np.minimum(b[piece], run_end[run])
    dst = (layout.row * L + layout.slot)[piece] + (lo - a[piece])
    srcs = src.start[run] + (lo - run_at[run])
    for c, s, d, n in zip(src.chunk[run].tolist(), srcs.tolist(), dst.tolist(), (hi - lo).tolist()):
        out[d : d + n] = src.flat[c][s : s + n]
    return out
