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
    if masks is None:  # the tokens go straight into the file's bytes: no shard-sized array besides them
        data, rows_at = _in_place(tokens, doc_chunk, doc_start, layout, pad_id, dtype)
        return PackedShard(data, layout, lengths, None, rows_at)
    if isinstance(tokens, Scattered):
        out = gather_scattered(tokens, doc_start, layout, pad_id, dtype)
        mask = gather_scattered(masks, doc_start, layout, 0, "uint8")
    else:
        out = gather(tokens, doc_chunk, doc_start, layout, pad_id, dtype)
        mask = gather(masks, doc_chunk, doc_start, layout, 0, "uint8")
    table = S.shard_table(out, seq_len, layout.row, layout.length, layout.doc, layout.offset, layout.num_rows,
                          loss_mask=mask)
    data = S.table_bytes(table)
    del out, table
    rows_at = S.layout.to_record(S.layout.shard_layout(data, layout.num_rows, seq_len, dtype, masks is not None))
    trained = None if mask is None else int(mask.sum(dtype=np.int64))
    return PackedShard(data, layout, lengths, trained, rows_at)


def _in_place(tokens, doc_chunk: np.ndarray, doc_start: np.ndarray, layout: Layout, pad_id: int,
              dtype: str) -> tuple:
    """(the shard's bytes, its ``rows_at``): the file laid out over a token column of zeros (``np.zeros``
    of that size is pages never touched: reading them costs no memory), then every piece copied to its
    slots in the file's own token buffers, one per record batch. Byte for byte the file ``gather``'s
    array made (the layout does not depend on the values), without that array: a unit of one 200 MB
    document held 2 bytes a token of it twice (docs/reliability.md)."""
    seq_len, rows = layout.seq_len, layout.num_rows
    table = S.shard_table(np.zeros(rows * seq_len, dtype), seq_len, layout.row, layout.length, layout.doc,
                          layout.offset, rows)
    data = S.table_bytes(table)
    del table
    at = S.layout.shard_layout(data, rows, seq_len, dtype, False)
    if rows:
        per = at[0] * seq_len  # tokens in each record batch but the last
        views = [np.frombuffer(data, dtype, count=min(per, rows * seq_len - k * per), offset=int(o))
                 for k, o in enumerate(at[3])]
        for v in views:
            v.fill(pad_id)
        if isinstance(tokens, Scattered):
            gather_scattered(tokens, doc_start, layout, pad_id, dtype, into=(views, per))
        else:
            gather(tokens, doc_chunk, doc_start, layout, pad_id, dtype, into=(views, per))
    return data, S.layout.to_record(at)


def gather(tokens: list[np.ndarray], doc_chunk: np.ndarray, doc_start: np.ndarray, layout: Layout, fill: int,
           dtype: str, into: tuple | None = None) -> np.ndarray | None:
    """Copy every piece's tokens to its slots; returns (rows * seq_len,) of ``dtype``, ``fill`` elsewhere.

    ``tokens`` holds each chunk's tokens; document d starts at ``doc_start[d]`` in
    ``tokens[doc_chunk[d]]``. One slice copy per piece: pieces are runs of hundreds of tokens on real
    text, so this moves memory at memcpy speed, where per-token fancy indexing built three int64 index
    arrays the size of the unit. ``into``: (views, per): write there instead (slot i at
    ``views[i // per][i % per]``, filled already) and return None.
    """
    seq_len = layout.seq_len
    out = np.full(layout.num_rows * seq_len, fill, dtype=dtype) if into is None else None
    if not len(layout.doc):
        return out
    chunk = doc_chunk[layout.doc]
    src = doc_start[layout.doc] + layout.offset
    dst = layout.row * seq_len + layout.slot
    if into is None:
        for c, s, d, n in zip(chunk.tolist(), src.tolist(), dst.tolist(), layout.length.tolist()):
            out[d : d + n] = tokens[c][s : s + n]
        return out
    copy_pieces(tokens, chunk, src, dst, layout.length, *into)
    return None


def gather_scattered(src: Scattered, doc_start: np.ndarray, layout: Layout, fill: int, dtype: str,
                     into: tuple | None = None) -> np.ndarray | None:
    """``gather`` from a ``Scattered``: each new piece cut where the runs it spans meet (one slice copy
    per part; a piece within one run, the common case, is one copy). ``into``: as ``gather``'s."""
    L = layout.seq_len
    out = np.full(layout.num_rows * L, fill, dtype=dtype) if into is None else None
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
    if into is not None:
        copy_pieces(src.flat, src.chunk[run], srcs, dst, hi - lo, *into)
        return None
    for c, s, d, n in zip(src.chunk[run].tolist(), srcs.tolist(), dst.tolist(), (hi - lo).tolist()):
        out[d : d + n] = src.flat[c][s : s + n]
    return out


RELEASE_BYTES = 64 << 20  # a mapped source this big is copied in its own order and let go as it goes
RELEASE_STEP = 16 << 20  # ... this many bytes of it at a time


def copy_pieces(srcs: list, chunk: np.ndarray, src: np.ndarray, dst: np.ndarray, length: np.ndarray,
                views: list[np.ndarray], per: int) -> None:
    """Copy piece i, ``srcs[chunk[i]][src[i] : src[i] + length[i]]``, to slots ``dst[i]`` on, slot j
    being ``views[j // per][j % per]`` (a piece never spans two views: it lies in one row).

    A source mapped from a file (a chunk's spilled ids, pipeline/spill.py) of ``RELEASE_BYTES`` or more
    is copied in its own order, and the pages already copied are let go (``MADV_DONTNEED``) every
    ``RELEASE_STEP``: the assembler of a 200 MB document holds its output and a step of its input, not
    both whole. The copies land where they would in any order, so the bytes do not change."""
    k, dst = np.divmod(dst, per)
    maps = {c: m for c, a in enumerate(srcs) if a.nbytes >= RELEASE_BYTES and (m := _mapping(a)) is not None}
    if maps:
        order = np.lexsort((src, chunk))
        chunk, src, k, dst, length = chunk[order], src[order], k[order], dst[order], length[order]
    gone = dict.fromkeys(maps, 0)  # source -> bytes of it let go
    for c, s, v, d, n in zip(chunk.tolist(), src.tolist(), k.tolist(), dst.tolist(), length.tolist()):
        views[v][d : d + n] = srcs[c][s : s + n]
        if c in maps and s * srcs[c].itemsize - gone[c] >= RELEASE_STEP:
            gone[c] = _let_go(maps[c], s * srcs[c].itemsize)
    for c, m in maps.items():
        _let_go(m, len(m))


def _mapping(a: np.ndarray):
    """The ``mmap`` that ``a`` views from its first byte on, or None."""
    import mmap

    base = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is None or np.frombuffer(base, np.uint8, count=1).ctypes.data != a.ctypes.data:
        return None
    return base


def _let_go(m, upto: int) -> int:
    """Drop the pages of mapping ``m`` below ``upto`` from this process (read again from the file if touched)."""
    import mmap

    upto -= upto % mmap.PAGESIZE
    if upto and hasattr(mmap, "MADV_DONTNEED"):
        m.madvise(mmap.MADV_DONTNEED, 0, upto)
    return upto
