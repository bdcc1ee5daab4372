"""The row layout: where each record batch's buffers lie in a shard file, recorded in index.arrow at
build time (docs/format.md, "Row layout") so that a reader's first use of a shard reads a row with a
few ``pread`` calls and parses no Arrow (packer/shards/shard_file.py).

A shard's layout is computed from the file as written (its footer and batch headers parsed once, by
pyarrow), so it is exact for any writer; a shard whose batches are not regular (every batch but the
last of ``batch_rows`` rows), whose schema is not the manifest's, or that cannot be read gets none
(``batch_rows`` 0): readers open it through its Arrow footer, as before the layout existed, and
report what is wrong with it there.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import xxhash

from .schema import LOSS_MASK, schema_problems

LAYOUT_VERSION = 1
LAYOUT_KEY = b"packer_layout_version"
SCALARS = ("batch_rows", "footer_bytes", "layout_xxh3_64")  # per shard
LISTS = ("ids_at", "lens_at", "lens_values_at")  # per shard, one value per record batch
MASK_AT = "mask_at"  # chat builds only: per batch, the loss_mask values
NONE = (0, 0, 0, None, None, None, None)
_I8 = np.dtype("<i8")  # no layout: the shard is read through its footer


def footer_bytes(data) -> int:
    """The size of the file's tail: the Arrow footer, its int32 length and the closing magic."""
    n = len(data)
    size = int.from_bytes(bytes(data[n - 10:n - 6]), "little", signed=True) + 10
    if not 10 < size <= n:
        raise ValueError("footer length out of range")
    return size


def stamp(tail, rows: int, foot: int, lists) -> int:
    """xxh3_64 of a shard's tail (its footer indexes every batch and holds the schema: a file rewritten in
    another shape has another), then of its layout as little-endian int64: batch_rows, footer_bytes, each
    list in turn. Checked at first use, it covers both the file and the index's record of it."""
    h = xxhash.xxh3_64(tail)
    h.update(struct.pack("<qq", rows, foot))
    for a in lists:
        h.update(a if a.flags.c_contiguous and a.dtype == _I8 else np.ascontiguousarray(a, _I8))
    return h.intdigest()


def shard_layout(data, rows: int, seq_len: int, dtype: str, mask: bool) -> tuple:
    """The layout of one shard held in ``data`` (a buffer of the whole file), or ``NONE``:
    (batch_rows, footer_bytes, footer_xxh3_64, ids_at, lens_at, lens_values_at, mask_at or None),
    the last four (batches,) int64 byte offsets into the file. ``mask``: the build has loss_mask."""
    try:
        buf = pa.py_buffer(data)
        reader = pa.ipc.open_file(buf)
        batches = [reader.get_batch(k) for k in range(reader.num_record_batches)]
        foot = footer_bytes(data)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError, ValueError):
        return NONE
    n = [b.num_rows for b in batches]
    names = reader.schema.names
    if (not n or schema_problems(reader.schema, seq_len, dtype) or (LOSS_MASK in names) != mask or sum(n) != rows
            or min(n) < 1 or any(x != n[0] for x in n[:-1]) or n[-1] > n[0]):
        return NONE
    base, at = buf.address, []
    for b in batches:
        ids, dl = b.column("input_ids").values.buffers(), b.column("doc_lens").buffers()
        one = [ids[1], dl[1], dl[3]] + ([b.column(LOSS_MASK).values.buffers()[1]] if mask else [])
        if any(x is None for x in one):
            return NONE
        at.append([x.address - base for x in one])
    cols = list(np.array(at, dtype=np.int64).T)
    return (n[0], foot, stamp(data[len(data) - foot:], n[0], foot, cols), *cols, *([] if mask else [None]))


def to_record(layout: tuple) -> dict | None:
    """A layout as JSON (a unit record's ``layout``: how an object-store build's index gets its layouts
    without reading its shards again), or None for ``NONE``."""
    if not layout[0]:
        return None
    keys = SCALARS + LISTS + ((MASK_AT,) if layout[6] is not None else ())
    return {k: (v if i < 3 else v.tolist()) for i, (k, v) in enumerate(zip(keys, layout))}


def from_record(d) -> tuple:
    """A unit record's ``layout`` back as a layout (``NONE`` where absent or malformed)."""
    try:
        lists = [np.array(d[k], dtype=np.int64) for k in LISTS + ((MASK_AT,) if MASK_AT in d else ())]
        out = (int(d["batch_rows"]), int(d["footer_bytes"]), int(d["layout_xxh3_64"]), *lists)
        return out + (None,) * (7 - len(out)) if all(x.ndim == 1 and len(x) == len(lists[0]) for x in lists) else NONE
    except (TypeError, KeyError, ValueError, OverflowError):
        return NONE


def layout_columns(layouts: list, mask: bool) -> dict[str, pa.Array]:
    """The index columns of ``layouts`` (one ``shard_layout`` per shard, in order)."""
    n = len(layouts)
    cols = {name: _numeric(np.fromiter((x[i] for x in layouts), np.int64 if i < 2 else np.uint64, n))
            for i, name in enumerate(SCALARS)}
    counts = np.fromiter((0 if x[3] is None else len(x[3]) for x in layouts), np.int64, n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    for i, name in enumerate(LISTS + ((MASK_AT,) if mask else ())):
        parts = [x[3 + i] for x in layouts if x[3] is not None]
        values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        cols[name] = pa.ListArray.from_arrays(_numeric(offsets), _numeric(values.astype(np.int64, copy=False)))
    return cols


def _numeric(a: np.ndarray) -> pa.Array:
    """A 1-D NumPy array as an Arrow array of its type, built from its buffer: ``pa.array`` of an
    ndarray imports pandas where it is installed (0.36 s at every build's end)."""
    a = np.ascontiguousarray(a)
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])


class Layouts:
    """The row layout columns of an index, as NumPy views of its map; ``of(k)`` gives shard k's
    (batch_rows, footer_bytes, footer_xxh3_64, ids_at, lens_at, lens_values_at, mask_at) or None."""

    def __init__(self, table: pa.Table):
        def one(name):
            c = table.column(name)
            return c.chunk(0) if c.num_chunks == 1 else c.combine_chunks()

        # (zero_copy_only: ArrowInvalid on nulls, a damaged index; False would go through pyarrow's pandas path)
        self.scalars = [one(name).to_numpy(zero_copy_only=True) for name in SCALARS]
        names = LISTS + ((MASK_AT,) if MASK_AT in table.column_names else ())
        lists = [one(name) for name in names]
        self.offsets = np.asarray(lists[0].offsets)
        if any(not np.array_equal(np.asarray(c.offsets), self.offsets) for c in lists[1:]):
            raise ValueError("the layout's list columns disagree")  # a damaged index: shards are read through their footers
        if any(c.null_count or c.values.null_count for c in lists):
            raise ValueError("nulls in the layout's list columns")
        self.values = [c.values.to_numpy(zero_copy_only=True) for c in lists]
        self.pad = (None,) * (4 - len(lists))

    def of(self, k: int) -> tuple | None:
        rows, foot, stamp = self.scalars[0][k], self.scalars[1][k], self.scalars[2][k]
        if rows <= 0:
            return None
        a, b = self.offsets[k:k + 2].tolist()
        return (int(rows), int(foot), int(stamp), *[v[a:b] for v in self.values], *self.pad)


def open_layouts(table: pa.Table, meta: dict) -> Layouts | None:
    """The layouts of an index that records them (a version this reader knows, every column), else None."""
    if meta.get(LAYOUT_KEY) != str(LAYOUT_VERSION).encode():
        return None
    if not all(name in table.column_names for name in SCALARS + LISTS):
        return None
    types = {**dict.fromkeys(SCALARS[:2], pa.int64()), SCALARS[2]: pa.uint64(),
             **dict.fromkeys(LISTS + (MASK_AT,), pa.list_(pa.int64()))}
    if any(name in table.column_names and not table.schema.field(name).type.equals(t) for name, t in types.items()):
        return None  # a damaged index: shards are read through their footers (and their stamps name the damage)
    try:
        return Layouts(table)
    except (pa.ArrowInvalid, TypeError, ValueError):
        return None
