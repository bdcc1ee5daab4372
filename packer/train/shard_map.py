"""Opening the shards of a PackedDataset: a private, copy-on-write memory map per shard, its piece
index copied out and checked (a damaged shard is one ``ShardError`` naming it, never a crash)."""

from __future__ import annotations

import os
import stat
from bisect import bisect_right
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
    needs_mask: bool = False  # a chat build: the shard must hold its loss_mask column

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



class ShardTable:
    """The shards of a dataset's builds, as their indexes' columns (packer/shards/index.py): where a
    row lies, and a shard's entry, made when asked. Nothing here is per shard in Python objects."""

    def __init__(self, stores: list, indexes: list, needs_mask: list[bool]):
        self.stores, self.indexes, self.needs_mask = stores, indexes, needs_mask
        self.row0 = np.cumsum([0] + [x.total_rows for x in indexes]).tolist()  # each build's first row
        self.shard0 = np.cumsum([0] + [x.n for x in indexes]).tolist()  # each build's first shard
        self.n = self.shard0[-1]

    def locate(self, i: int) -> tuple[int, int]:
        """(shard, row in it) of row ``i``."""
        b = bisect_right(self.row0, i) - 1 if len(self.indexes) > 1 else 0
        x, i = self.indexes[b], i - self.row0[b]
        s = int(x.starts.searchsorted(i, "right")) - 1
        return self.shard0[b] + s, i - int(x.starts[s])

    def locate_many(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shards, rows in them) of rows ``idx`` ((n,) int64)."""
        if len(self.indexes) == 1:
            s = self.indexes[0].starts.searchsorted(idx, "right") - 1
            return s, idx - self.indexes[0].starts[s]
        b = np.searchsorted(self.row0, idx, "right") - 1
        sid, local = np.empty_like(idx), np.empty_like(idx)
        for k in np.unique(b).tolist():
            on, x = b == k, self.indexes[k]
            i = idx[on] - self.row0[k]
            s = x.starts.searchsorted(i, "right") - 1
            sid[on], local[on] = s + self.shard0[k], i - x.starts[s]
        return sid, local

    def entry(self, k: int) -> ShardEntry:
        b = bisect_right(self.shard0, k) - 1
        x, s, store = self.indexes[b], k - self.shard0[b], self.stores[b]
        rel = x.path(s)
        e = ShardEntry(store, rel, int(x.rows[s]), int(x.nbytes[s]), x.checksum(s), self.needs_mask[b])
        if not store.inside(rel):
            raise ShardError(f"{store.path(S.MANIFEST)}: shard path {rel!r} points outside the build folder")
        return e


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


def check_size(e: ShardEntry) -> None:
    """A local shard is a regular file of the manifest's size (one stat: done at first use)."""
    try:
        st = os.stat(e.path)
    except FileNotFoundError:
        raise ShardError(f"{e.path}: shard is missing") from None
    except OSError as err:
        raise ShardError(f"{e.path}: cannot read shard ({err.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ShardError(f"{e.path}: not a regular file (a FIFO, device or folder): shard is corrupt")
    if st.st_size != e.nbytes:
        what = "truncated" if st.st_size < e.nbytes else "longer than the manifest says"
        raise ShardError(f"{e.path}: shard is {what} ({st.st_size} bytes, manifest says {e.nbytes})")


def check_checksum(e: ShardEntry) -> None:
    """The whole file hashed (xxh3_128) against the manifest (``verify=True``)."""
    got = S.file_checksum(e.path)
    if got != e.checksum:
        raise ShardError(f"{e.path}: checksum mismatch ({S.CHECKSUM} {got}, manifest says {e.checksum}): shard is corrupt")


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
    if mask_at is None and e.needs_mask:
        raise ShardError(f"{e.path}: no {S.LOSS_MASK} column, but the manifest says this is a chat build "
                         "(it would train on every token): shard is corrupt")
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


VERIFY_THREADS = 8


def verify_all(n: int, check) -> None:
    """``check(k)`` for every shard k < n, in threads (hashing and mapping release the GIL), a bounded
    number at a time; the first failure in manifest order is raised."""
    if n <= 1:
        return check(0) if n else None
    from concurrent.futures import ThreadPoolExecutor

    threads = min(VERIFY_THREADS, os.cpu_count() or 1, n)
    with ThreadPoolExecutor(threads, thread_name_prefix="packer-verify") as pool:
        for a in range(0, n, 1024):
            for _ in pool.map(check, range(a, min(a + 1024, n))):
                pass
