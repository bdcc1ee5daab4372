"""Opening the shards of a PackedDataset: a private, copy-on-write memory map per shard, its piece
index copied out and checked (a damaged shard is one ``ShardError`` naming it, never a crash)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import Storage


@dataclass(frozen=True)
class ShardEntry:
    store: Storage  # the build's folder or prefix
    rel: str  # the shard's name in it, as the manifest gives it
    rows: int
    nbytes: int
    checksum: str

    @property
    def path(self) -> str:
        """The shard as messages name it (a path, or a URI)."""
        return self.store.path(self.rel)


class Mapped:
    """One shard mapped in this process.

    ``tokens`` is a flat view of the mapped file in the shard dtype. ``row``
    is (rows, 4) int64: for row r, where its tokens start in ``tokens``, where
    its pieces start and end in ``lens`` (and ``slot``: where each piece
    starts in its row), and how many slots they fill. One fetch and
    ``tolist()`` per row read is cheaper than four NumPy scalar reads.
    """

    __slots__ = ("storage", "tokens", "row", "lens", "slot", "mem", "mask_at")

    def __init__(self, storage, tokens, row, lens, slot, mem=None, mask_at=None):
        self.storage = storage  # keeps the mapping alive
        self.tokens = tokens
        self.row = row
        self.lens = lens
        self.slot = slot
        self.mem = mem  # the mapped file as uint8 (where the loss mask is read)
        self.mask_at = mask_at  # (rows,) int64 byte offset of each row's loss_mask in mem; None: no loss_mask column

    def mask(self, j: int, seq_len: int) -> np.ndarray | None:
        """Row j's loss mask, (seq_len,) uint8 viewing the map (1 = trained), or None for a build without one."""
        if self.mask_at is None:
            return None
        a = int(self.mask_at[j])
        return self.mem[a:a + seq_len]



# --------------------------------------------------------------------------
# Opening and checking shards.


def check_compatible(a: tuple[str, dict], b: tuple[str, dict]) -> None:
    (pa_, ma), (pb, mb) = a, b
    for key, get in (
        ("seq_len", lambda m: m["seq_len"]),
        ("dtype", lambda m: m["dtype"]),
        ("pad_id", lambda m: m.get("pad_id")),
        ("tokenizer fingerprint", lambda m: m["tokenizer"].get("fingerprint")),
    ):
        if get(ma) != get(mb):
            raise PackerError(
                f"{pb}: {key} {get(mb)!r} differs from {get(ma)!r} in {pa_}; builds read together must agree"
            )


def check_listed(store: Storage, entries: list[ShardEntry]) -> None:
    """Every shard is in the store with its size: one listing."""
    objects = store.list()
    for e in entries:
        size = objects.get(e.rel)
        if size is None:
            raise ShardError(f"{e.path}: shard is missing")
        if size != e.nbytes:
            what = "truncated" if size < e.nbytes else "longer than the manifest says"
            raise ShardError(f"{e.path}: shard is {what} ({size} bytes, manifest says {e.nbytes})")


def check_file(e: ShardEntry, seq_len: int, dtype: str, verify: bool) -> None:
    """Cheap checks for every shard on open; ``verify`` adds the checksum."""
    try:
        size = os.path.getsize(e.path)
    except FileNotFoundError:
        raise ShardError(f"{e.path}: shard is missing") from None
    except OSError as err:
        raise ShardError(f"{e.path}: cannot read shard ({err.strerror})") from None
    if size != e.nbytes:
        what = "truncated" if size < e.nbytes else "longer than the manifest says"
        raise ShardError(f"{e.path}: shard is {what} ({size} bytes, manifest says {e.nbytes})")
    if verify:
        got = S.file_checksum(e.path)
        if got != e.checksum:
            raise ShardError(f"{e.path}: checksum mismatch ({S.CHECKSUM} {got}, manifest says {e.checksum}): shard is corrupt")
    table = S.open_shard(e.path, seq_len, dtype)
    if table.num_rows != e.rows:
        raise ShardError(f"{e.path}: {table.num_rows} rows, manifest says {e.rows}")


def map_shard(e: ShardEntry, path: str, seq_len: int, dt: np.dtype) -> Mapped:
    """Map one shard (a local file at ``path``) privately and copy out its piece index, checking it.
    Longer than 60 lines: one pass over the shard's batches with a bounds check per step; split, the checks would lose the offsets they guard.
    """
    try:
        storage = torch.from_file(path, shared=False, size=e.nbytes, dtype=torch.uint8)
    except RuntimeError as err:
        raise ShardError(f"{e.path}: cannot map shard ({str(err).splitlines()[0]})") from None
    mem = storage.numpy()  # writable: private pages
    table = S.open_shard_buffer(mem, e.path, seq_len, str(dt))
    if table.num_rows != e.rows:
        raise ShardError(f"{e.path}: {table.num_rows} rows, manifest says {e.rows}")
    base = mem.ctypes.data
    isz = dt.itemsize
    row_at, piece_at, lens = [], [np.zeros(1, np.int64)], []
    mask_at = [] if S.LOSS_MASK in table.schema.names else None
    n_pieces = 0
    for batch in table.to_batches():
        n = batch.num_rows
        if not n:
            continue
        ids, dl = batch.column("input_ids"), batch.column("doc_lens")
        child = ids.values
        addr = child.buffers()[1].address + (child.offset + ids.offset * seq_len) * isz
        off = addr - base
        if off < 0 or off % isz or off + n * seq_len * isz > len(mem):
            raise ShardError(f"{e.path}: input_ids lie outside the file: shard is corrupt")
        row_at.append(off // isz + np.arange(n, dtype=np.int64) * seq_len)
        if mask_at is not None:
            mk = batch.column(S.LOSS_MASK)  # (type checked by open_shard_buffer)
            mv = mk.values
            moff = mv.buffers()[1].address + mv.offset + mk.offset * seq_len - base
            if moff < 0 or moff + n * seq_len > len(mem):
                raise ShardError(f"{e.path}: loss_mask lies outside the file: shard is corrupt")
            mask_at.append(moff + np.arange(n, dtype=np.int64) * seq_len)
        offs = dl.offsets.to_numpy().astype(np.int64)
        vals = dl.values.to_numpy()
        if offs[0] < 0 or np.any(np.diff(offs) < 0) or offs[-1] > len(vals):
            raise ShardError(f"{e.path}: doc_lens offsets are out of order: shard is corrupt")
        lens.append(vals[offs[0]:offs[-1]])
        piece_at.append(offs[1:] - offs[0] + n_pieces)
        n_pieces += int(offs[-1] - offs[0])
    row_at = np.concatenate(row_at) if row_at else np.zeros(0, np.int64)
    piece_at = np.concatenate(piece_at)
    lens = np.concatenate(lens) if lens else np.zeros(0, np.uint32)
    if len(lens) and (lens.min() < 1 or lens.max() > seq_len):
        raise ShardError(f"{e.path}: a doc_lens entry is outside 1..{seq_len}: shard is corrupt")
    lens = lens.astype(np.int32)  # the copy of the index; int32 is what torch indexes with
    cum = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cum[1:])
    used = cum[piece_at[1:]] - cum[piece_at[:-1]]
    if len(used) and used.max() > seq_len:
        r = int(np.argmax(used > seq_len))
        raise ShardError(f"{e.path}: row {r}'s doc_lens sum to {int(used[r])} > seq_len {seq_len}: shard is corrupt")
    usable = len(mem) - len(mem) % isz
    tokens = mem[:usable].view(dt)
    del table  # the index is copied; the Arrow objects are not needed any more
    row_of_piece = np.repeat(np.arange(len(used), dtype=np.int64), np.diff(piece_at))
    slot = (cum[:-1] - cum[piece_at[:-1]][row_of_piece]).astype(np.int32)
    row = np.stack([row_at, piece_at[:-1], piece_at[1:], used], axis=1)
    if mask_at is not None:
        mask_at = np.concatenate(mask_at) if mask_at else np.zeros(0, np.int64)
    return Mapped(storage, tokens, row, lens, slot, mem, mask_at)
