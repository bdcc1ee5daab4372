"""A shard mapped privately (copy-on-write), read through its Arrow footer: NumPy views of the map by
the addresses the footer and batch headers give, a record batch's piece index copied out and checked
when the batch is first read. Torch-free: packer/train/ makes tensors of these views.

What the dataset reads a shard with when index.arrow records no row layout for it (a build made
before the layout, a shard fetched from an object store into the cache, ``verify=True``); else
shard_file.py reads it by that layout, parsing no Arrow. A damaged shard is one ``ShardError``
naming it (packer/shards/checks.py), never a crash.

Mapped with ``mmap.ACCESS_COPY`` (``MAP_PRIVATE``): pages are the page cache's until written, and a
row handed out as a view can be written by the trainer without touching the file. (Until 0a283c5
this was ``torch.from_file(shared=False)``, the same mapping; bench/loader_bench.py measured the two
alike, docs/benchmarks.md, so torch is not needed for it. Python's mmap keeps a duplicate of the
descriptor, so a mapped shard holds one; the dataset keeps at most ``max_open_shards`` mapped.)
"""

from __future__ import annotations

import mmap
import os
from bisect import bisect_right

import numpy as np
import pyarrow as pa

from ..errors import ShardError
from .checks import HEAD, boundary_problem, head_schema, row_used, schema_extent, schema_problems_of, shard_fd
from .layout import shard_layout
from .schema import LOSS_MASK, MAGIC, ipc_problems


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

    ``mem`` is the file, (nbytes,) uint8 over the private map (writable); ``tokens`` a flat view of
    it in the shard dtype; ``part(j)`` gives row j's record batch's ``Part`` (made on first use: a
    shard costs what its touched batches cost) and the row's place in it. ``entry``: any object with
    ``path`` (named in messages), ``rows``, ``nbytes`` and ``needs_mask``.
    """

    __slots__ = ("storage", "mem", "tokens", "batches", "bounds", "parts", "entry", "seq_len", "isz")

    def __init__(self, storage, mem, tokens, batches, entry, seq_len):
        self.storage, self.mem, self.tokens = storage, mem, tokens  # storage (the mmap) keeps the mapping alive
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


_ACCEPTED: dict = {}  # (seq_len, dtype, needs_mask) -> schema messages and footer schemas already checked


def check_head(e, head, seq_len: int, dtype: str) -> None:
    """The ARROW1 magic and the schema message at the start of the file (``head``: at least its first
    bytes up to that message's end) pass the schema rule; ``ShardError`` naming ``e.path`` if not.
    A message already accepted (the shards of a build share theirs) costs one bytes compare."""
    seen = _ACCEPTED.setdefault((seq_len, dtype, bool(e.needs_mask)), [])
    if any(len(x) <= len(head) and bytes(head[:len(x)]) == x for x in seen if isinstance(x, bytes)):
        return
    try:
        schema = head_schema(head)
    except ValueError as err:
        raise ShardError(f"{e.path}: {err}") from None
    problems = schema_problems_of(schema, seq_len, dtype, e.needs_mask)
    if problems:
        raise ShardError(f"{e.path}: {problems[0]}")
    if len(seen) < 16:
        seen.append(bytes(head[:schema_extent(head)]))


def _check_footer_schema(e, schema: pa.Schema, seq_len: int, dtype: str) -> None:
    seen = _ACCEPTED.setdefault((seq_len, dtype, bool(e.needs_mask)), [])
    if any(isinstance(x, pa.Schema) and schema.equals(x) for x in seen):
        return
    problems = schema_problems_of(schema, seq_len, dtype, e.needs_mask)
    if problems:
        raise ShardError(f"{e.path}: {problems[0]}")
    if len(seen) < 16:
        seen.append(schema)


def map_shard(e, path: str, seq_len: int, dt: np.dtype) -> Mapped:
    """Map one shard (a local file at ``path``: a regular file of ``e.nbytes``, opened without blocking)
    privately, check its head (magic, schema message), read its footer and batch headers, check the
    footer's schema and its row count. The piece index of a batch is read and checked when the batch
    is (``_part``)."""
    fd = shard_fd(path, e.nbytes)
    try:
        if e.nbytes < 12:
            raise ShardError(f"{e.path}: not an Arrow IPC file (no ARROW1 magic at the start)")
        storage = mmap.mmap(fd, e.nbytes, access=mmap.ACCESS_COPY)  # private: rows may be written
    except (OSError, ValueError) as err:
        raise ShardError(f"{e.path}: cannot map shard ({err})") from None
    finally:
        os.close(fd)  # the map keeps the file
    mem = np.frombuffer(storage, np.uint8)  # writable: private pages
    if bytes(mem[-6:]) != MAGIC:
        _refuse_ipc(e, mem)
    check_head(e, mem[:max(HEAD, min(len(mem), 1 << 16))], seq_len, str(dt))
    try:
        reader = pa.ipc.open_file(pa.py_buffer(mem))
        batches = [reader.get_batch(k) for k in range(reader.num_record_batches)]  # headers: zero-copy views
    except (pa.ArrowException, OSError) as err:
        _refuse_ipc(e, mem)
        raise ShardError(f"{e.path}: not a readable Arrow file ({str(err).splitlines()[0]})") from None
    _check_footer_schema(e, reader.schema, seq_len, str(dt))
    rows = sum(b.num_rows for b in batches)
    if rows != e.rows:
        raise ShardError(f"{e.path}: {rows} rows, manifest says {e.rows}")
    usable = len(mem) - len(mem) % dt.itemsize
    return Mapped(storage, mem, mem[:usable].view(dt), batches, e, seq_len)


def check_layout(e, m: Mapped, recorded: tuple, dtype: str) -> None:
    """The row layout index.arrow records for shard ``e`` is the file's (``verify=True``)."""
    got = shard_layout(m.mem, e.rows, m.seq_len, dtype, recorded[6] is not None)
    if tuple(got[:3]) != tuple(recorded[:3]) or not all(
            (a is None) == (b is None) and (a is None or np.array_equal(a, b)) for a, b in zip(got[3:], recorded[3:])):
        raise ShardError(f"{e.path}: index.arrow's row layout differs from the shard's (a damaged index, "
                         "or a shard rewritten since the build): shard is corrupt")


def _refuse_ipc(e, mem) -> None:
    """Raise the precise reason a shard cannot be read in place (schema.ipc_problems), if there is one."""
    problems = ipc_problems(mem)
    if problems:
        raise ShardError(f"{e.path}: {problems[0]}")


def _part(m: Mapped, k: int) -> Part:
    """Batch k's piece index, copied out of the map and checked (every offset before NumPy follows it):
    the batch's buffers located by their addresses in the map."""
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
    if LOSS_MASK in batch.schema.names:
        mk = batch.column(LOSS_MASK)
        mv = mk.values
        moff = (mv.buffers()[1].address + mv.offset + mk.offset * L - base) if n else 0
        if moff < 0 or moff + n * L > len(mem):
            raise ShardError(f"{e.path}: loss_mask lies outside the file: shard is corrupt")
        mask_at = moff + np.arange(n, dtype=np.int64) * L
    offs = dl.offsets.to_numpy().astype(np.int64)
    vals = dl.values.to_numpy()
    problem = boundary_problem(offs, len(vals), None, L)
    lens = None if problem else vals[offs[0]:offs[-1]]
    problem = problem or boundary_problem(offs, len(vals), lens, L, m.bounds[k])
    if problem:
        raise ShardError(f"{e.path}: {problem}")
    lens = lens.astype(np.int32)  # the copy of the index; int32 is what torch indexes with
    piece_at = offs - offs[0]
    used = row_used(piece_at, lens)
    cum = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cum[1:])
    row_of_piece = np.repeat(np.arange(n, dtype=np.int64), np.diff(piece_at))
    slot = (cum[:-1] - cum[piece_at[:-1]][row_of_piece]).astype(np.int32)
    return Part(np.stack([row_at, piece_at[:-1], piece_at[1:], used], axis=1), lens, slot, mask_at)
