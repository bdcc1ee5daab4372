"""Opening the shards of a PackedDataset: a private, copy-on-write memory map per shard, its piece
index copied out and checked (a damaged shard is one ``ShardError`` naming it, never a crash)."""

from __future__ import annotations

import os
import stat
from bisect import bisect_right
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import torch

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import Storage
from ..io.cpus import cpu_limit
from ..shards.schema import MAGIC


class ShardEntry(NamedTuple):  # (a tuple: made at every shard's first use, cheaper than a dataclass)
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


class Part:
    """The piece index of one record batch of a mapped shard, copied out and checked when the batch is
    first read. ``row`` is (rows, 4) int64: for row r, where its tokens start in the shard's
    ``tokens``, where its pieces start and end in ``lens`` (and ``slot``: where each piece starts in
    its row), and how many slots they fill. One fetch and ``tolist()`` per row read is cheaper than
    four NumPy scalar reads."""

    __slots__ = ("row", "lens", "slot", "mask_at")

    def __init__(self, row, lens, slot, mask_at):
        self.row, self.lens, self.slot = row, lens, slot
        self.mask_at = mask_at  # (rows,) int64 byte offset of each row's loss_mask in the map; None: no column

    def mask(self, mem: np.ndarray, j: int, seq_len: int) -> np.ndarray | None:
        """Row j's loss mask, (seq_len,) uint8 viewing the map (1 = trained), or None for a build without one."""
        if self.mask_at is None:
            return None
        a = int(self.mask_at[j])
        return mem[a:a + seq_len]


class Mapped:
    """One shard mapped in this process: its footer and batch headers read, nothing else.

    ``tokens`` is a flat view of the mapped file in the shard dtype; ``part(j)`` gives row j's
    record batch's ``Part`` (made on first use: a shard costs what its touched batches cost) and
    the row's place in it.
    """

    __slots__ = ("storage", "mem", "tokens", "batches", "bounds", "parts", "entry", "seq_len", "isz")

    def __init__(self, storage, mem, tokens, batches, entry, seq_len):
        self.storage, self.mem, self.tokens = storage, mem, tokens  # storage keeps the mapping alive
        self.batches, self.entry, self.seq_len, self.isz = batches, entry, seq_len, tokens.itemsize
        self.bounds = np.cumsum([0] + [b.num_rows for b in batches]).tolist()
        self.parts: list[Part | None] = [None] * len(batches)

    def part(self, j: int) -> tuple[Part, int]:
        k = 0 if len(self.parts) == 1 else bisect_right(self.bounds, j) - 1
        p = self.parts[k]
        if p is None:
            p = self.parts[k] = _part(self, k)
        return p, j - self.bounds[k]

    def fetch(self, j: int):
        """Row j: (tokens (L,) viewing the map, piece lengths (P,) int32, slots used, loss mask or None)."""
        p, j = self.part(j)
        a, p0, p1, u = p.row[j].tolist()
        return self.tokens[a:a + self.seq_len], p.lens[p0:p1], u, p.mask(self.mem, j, self.seq_len)

    def check_all(self) -> None:
        """Index (and so check) every batch: what ``verify=True`` asks of each shard."""
        for k in range(len(self.parts)):
            if self.parts[k] is None:
                self.parts[k] = _part(self, k)


class ShardTable:
    """The shards of a dataset's builds, as their indexes' columns (packer/shards/index.py): where a
    row lies, and a shard's entry, made when asked. Nothing here is per shard in Python objects."""

    def __init__(self, stores: list, indexes: list, needs_mask: list[bool]):
        self.stores, self.indexes, self.needs_mask = stores, indexes, needs_mask
        self.row0 = np.cumsum([0] + [x.total_rows for x in indexes]).tolist()  # each build's first row
        self.shard0 = np.cumsum([0] + [x.n for x in indexes]).tolist()  # each build's first shard
        self.n = self.shard0[-1]

    def starts(self) -> np.ndarray:
        """Every shard's first row in the dataset's numbering, (n,) int64."""
        return np.concatenate([np.asarray(x.starts, np.int64) + r0 for x, r0 in zip(self.indexes, self.row0)]
                              or [np.zeros(0, np.int64)])

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

    def layout(self, k: int) -> tuple | None:
        """Shard k's row layout where its index records one (packer/shards/layout.py), else None."""
        b = bisect_right(self.shard0, k) - 1 if len(self.indexes) > 1 else 0
        x = self.indexes[b]
        return x.layouts.of(k - self.shard0[b]) if x.layouts is not None and self.stores[b].local else None

    def entry(self, k: int, checksum: bool = True) -> ShardEntry:
        """Shard k's entry (``checksum`` False: without its checksum, for a read that does not hash it)."""
        b = bisect_right(self.shard0, k) - 1 if len(self.indexes) > 1 else 0
        x, s, store = self.indexes[b], k - self.shard0[b], self.stores[b]
        rel = x.path(s)
        e = ShardEntry(store, rel, int(x.rows[s]), int(x.nbytes[s]), x.checksum(s) if checksum else "", self.needs_mask[b])
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


_ACCEPTED: dict = {}  # (seq_len, dtype) -> schemas already checked (a few: shards of a build share theirs)


def map_shard(e: ShardEntry, path: str, seq_len: int, dt: np.dtype) -> Mapped:
    """Map one shard (a local file at ``path``) privately, read its footer and batch headers, check its
    schema and row count. The piece index of a batch is read and checked when the batch is (``_part``)."""
    try:
        storage = torch.from_file(path, shared=False, size=e.nbytes, dtype=torch.uint8)
    except RuntimeError as err:
        raise ShardError(f"{e.path}: cannot map shard ({str(err).splitlines()[0]})") from None
    mem = storage.numpy()  # writable: private pages
    if len(mem) < 12 or bytes(mem[:6]) != MAGIC or bytes(mem[-6:]) != MAGIC:
        _refuse_ipc(e, mem)
    try:
        reader = pa.ipc.open_file(pa.py_buffer(mem))
        batches = [reader.get_batch(k) for k in range(reader.num_record_batches)]  # headers: zero-copy views
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
        _refuse_ipc(e, mem)
        raise ShardError(f"{e.path}: not a readable Arrow file ({str(err).splitlines()[0]})") from None
    _check_schema(e, reader.schema, seq_len, str(dt))
    rows = sum(b.num_rows for b in batches)
    if rows != e.rows:
        raise ShardError(f"{e.path}: {rows} rows, manifest says {e.rows}")
    usable = len(mem) - len(mem) % dt.itemsize
    return Mapped(storage, mem, mem[:usable].view(dt), batches, e, seq_len)


def check_layout(e: ShardEntry, m: Mapped, recorded: tuple, dtype: str) -> None:
    """The row layout index.arrow records for shard ``e`` is the file's (``verify=True``)."""
    from ..shards.layout import shard_layout

    got = shard_layout(m.mem, e.rows, m.seq_len, dtype, recorded[6] is not None)
    if tuple(got[:3]) != tuple(recorded[:3]) or not all(
            (a is None) == (b is None) and (a is None or np.array_equal(a, b)) for a, b in zip(got[3:], recorded[3:])):
        raise ShardError(f"{e.path}: index.arrow's row layout differs from the shard's (a damaged index, "
                         "or a shard rewritten since the build): shard is corrupt")


def _refuse_ipc(e: ShardEntry, mem) -> None:
    """Raise the precise reason a shard cannot be read in place (schema.ipc_problems), if there is one."""
    problems = S.ipc_problems(mem)
    if problems:
        raise ShardError(f"{e.path}: {problems[0]}")


def _check_schema(e: ShardEntry, schema: pa.Schema, seq_len: int, dtype: str) -> None:
    seen = _ACCEPTED.setdefault((seq_len, dtype), [])
    has_mask = S.LOSS_MASK in schema.names
    if not any(schema.equals(x) for x in seen):
        problems = S.schema_problems(schema, seq_len, dtype)
        if problems:
            raise ShardError(f"{e.path}: schema does not match manifest: {problems[0]}")
        if has_mask and not schema.field(S.LOSS_MASK).type.equals(S.loss_mask_type(seq_len)):
            raise ShardError(f"{e.path}: column {S.LOSS_MASK} is {schema.field(S.LOSS_MASK).type}, "
                             f"not {S.loss_mask_type(seq_len)}: shard is corrupt")
        if len(seen) < 8:
            seen.append(schema)
    if e.needs_mask and not has_mask:
        raise ShardError(f"{e.path}: no {S.LOSS_MASK} column, but the manifest says this is a chat build "
                         "(it would train on every token): shard is corrupt")


def _part(m: Mapped, k: int) -> Part:
    """Batch k's piece index, copied out of the map and checked (every offset before NumPy follows it).
    Longer than 60 lines: one pass over the batch with a bounds check per step; split, the checks
    would lose the offsets they guard."""
    e, L, isz, mem, batch = m.entry, m.seq_len, m.isz, m.mem, m.batches[k]
    n, base = batch.num_rows, mem.ctypes.data
    try:
        batch.validate()  # buffer sizes against lengths: cheap, catches a cut body
    except pa.ArrowInvalid as err:
        raise ShardError(f"{e.path}: not a readable Arrow file ({str(err).splitlines()[0]})") from None
    ids, dl = batch.column("input_ids"), batch.column("doc_lens")
    child = ids.values
    bufs = child.buffers()
    if n and bufs[1] is None:
        raise ShardError(f"{e.path}: input_ids hold no data: shard is corrupt")
    off = (bufs[1].address + (child.offset + ids.offset * L) * isz - base) if n else 0
    if off < 0 or off % isz or off + n * L * isz > len(mem):
        _refuse_ipc(e, mem)  # a compressed body lies outside the map: say so
        raise ShardError(f"{e.path}: input_ids lie outside the file: shard is corrupt")
    row_at = off // isz + np.arange(n, dtype=np.int64) * L
    mask_at = None
    if S.LOSS_MASK in batch.schema.names:
        mk = batch.column(S.LOSS_MASK)
        mv = mk.values
        moff = (mv.buffers()[1].address + mv.offset + mk.offset * L - base) if n else 0
        if moff < 0 or moff + n * L > len(mem):
            raise ShardError(f"{e.path}: loss_mask lies outside the file: shard is corrupt")
        mask_at = moff + np.arange(n, dtype=np.int64) * L
    offs = dl.offsets.to_numpy().astype(np.int64)
    vals = dl.values.to_numpy()
    if offs[0] < 0 or np.any(np.diff(offs) < 0) or offs[-1] > len(vals):
        raise ShardError(f"{e.path}: doc_lens offsets are out of order: shard is corrupt")
    lens = vals[offs[0]:offs[-1]]
    piece_at = offs - offs[0]
    if len(lens) and (lens.min() < 1 or lens.max() > L):
        raise ShardError(f"{e.path}: a doc_lens entry is outside 1..{L}: shard is corrupt")
    lens = lens.astype(np.int32)  # the copy of the index; int32 is what torch indexes with
    cum = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cum[1:])
    used = cum[piece_at[1:]] - cum[piece_at[:-1]]
    if len(used) and used.max() > L:
        r = int(np.argmax(used > L)) + m.bounds[k]
        raise ShardError(f"{e.path}: row {r}'s doc_lens sum to {int(used[np.argmax(used > L)])} > seq_len {L}: shard is corrupt")
    row_of_piece = np.repeat(np.arange(n, dtype=np.int64), np.diff(piece_at))
    slot = (cum[:-1] - cum[piece_at[:-1]][row_of_piece]).astype(np.int32)
    return Part(np.stack([row_at, piece_at[:-1], piece_at[1:], used], axis=1), lens, slot, mask_at)


VERIFY_THREADS = 8


def verify_all(n: int, check) -> None:
    """``check(k)`` for every shard k < n, in threads (hashing and mapping release the GIL), a bounded
    number at a time; the first failure in manifest order is raised."""
    if n <= 1:
        return check(0) if n else None
    from concurrent.futures import ThreadPoolExecutor

    threads = min(VERIFY_THREADS, cpu_limit().count, n)
    with ThreadPoolExecutor(threads, thread_name_prefix="packer-verify") as pool:
        for a in range(0, n, 1024):
            for _ in pool.map(check, range(a, min(a + 1024, n))):
                pass
