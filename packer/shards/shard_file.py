"""A shard read by offsets (what PackedDataset reads a local shard with where index.arrow records its layout): index.arrow's row layout (packer/shards/layout.py) says where each record
batch's buffers lie, so a row is three or four NumPy views of a plain private map of the file (its
tokens, its two doc_lens offsets, its piece lengths, its loss mask): no Arrow is parsed and no
batch indexed, on first use or after. What a process keeps of a shard is that map (pages touched
only) and its layout (a few int64 per record batch, viewing the index).

Checked at first use: the file is a regular file of the manifest's size, opened without blocking;
its head (the ARROW1 magic and the schema message, as mapped.check_head checks them: one ``pread`` of
its first 4 KiB, a bytes compare once a build's schema is accepted); its tail (Arrow footer, length, magic) and the layout itself hash to the
``layout_xxh3_64`` the index records (a shard truncated, rewritten or replaced since the build, or a
damaged index, fails there in one line; a truncated one or another kind of file says so); every read: the row within the file, its doc_lens offsets in order, pieces of 1..seq_len
slots summing to at most seq_len (what the mapped path checks of every batch).
"""

from __future__ import annotations

import mmap
import os
import stat

import numpy as np

from ..errors import ShardError
from .checks import schema_extent, shard_fd
from .layout import stamp as layout_stamp
from .mapped import check_head

FAST = hasattr(os, "preadv") and hasattr(mmap, "ACCESS_COPY")  # POSIX; elsewhere shards are read through Arrow
_I4, _U4 = np.dtype("<i4"), np.dtype("<u4")
HEAD_READ = 4096  # what the first use reads of the file's start: the magic and the schema message (552 bytes here)


class ShardFile:
    """One shard open for reading by its layout; ``fetch(j)`` is row j's (tokens, lens, used, mask).
    Its first row is read with ``preadv`` (one open, no map: most shards of a shuffled epoch are
    touched once per worker); a shard used again is mapped, privately, and read through views."""

    __slots__ = ("fd", "mm", "used", "entry", "L", "dt", "isz", "R", "ids_at", "lens_at", "vals_at", "mask_at")

    def __init__(self, e, layout: tuple, seq_len: int, dt: np.dtype):
        R, foot, want, ids_at, lens_at, vals_at, mask_at = layout
        self.fd, self.mm, self.used, self.entry, self.L, self.dt, self.isz, self.R = -1, None, False, e, seq_len, dt, dt.itemsize, R
        self.ids_at, self.lens_at, self.vals_at = ids_at.tolist(), lens_at.tolist(), vals_at.tolist()
        self.mask_at = None if mask_at is None else mask_at.tolist()
        if len(self.ids_at) != (e.rows + R - 1) // R or not 10 < foot <= e.nbytes:
            raise ShardError(f"{e.path}: index.arrow's row layout does not fit the shard ({len(self.ids_at)} record batches "
                             f"for {e.rows} rows of {R}): the index is damaged (delete it: the manifest is read instead)")
        self.fd = shard_fd(e.path, e.nbytes)  # regular, of the manifest's size (never blocks on a FIFO)
        self._check_head()
        try:
            tail = self._read(np.uint8, foot, e.nbytes - foot)  # short (a truncated file) or refused (a folder, a FIFO)
        except (OSError, ValueError):
            tail = None
        lists = (ids_at, lens_at, vals_at) + (() if mask_at is None else (mask_at,))
        if tail is None or layout_stamp(tail, R, foot, lists) != want:
            self._stat()  # the precise reason, if it is the file's kind or size
            raise ShardError(f"{e.path}: shard differs from the one its build indexed (rewritten or replaced since, "
                             "or index.arrow is damaged: its layout_xxh3_64 does not match): shard is corrupt")

    def _check_head(self) -> None:
        """The magic and schema message at the file's start (mapped.check_head)."""
        e, head = self.entry, np.zeros(0, np.uint8)
        try:
            head = self._read(np.uint8, min(HEAD_READ, e.nbytes), 0)
            end = schema_extent(head)
            if end > len(head) and end <= e.nbytes:
                head = self._read(np.uint8, end, 0)
        except ValueError:
            pass  # no magic, a cut read: check_head names it
        check_head(e, head, self.L, str(self.dt))

    def __del__(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _stat(self) -> None:
        """The file is a regular file of the manifest's size (else ``ShardError``, one line)."""
        e = self.entry
        st = os.fstat(self.fd)
        if not stat.S_ISREG(st.st_mode):
            raise ShardError(f"{e.path}: not a regular file (a FIFO, device or folder): shard is corrupt")
        if st.st_size != e.nbytes:
            what = "truncated" if st.st_size < e.nbytes else "longer than the manifest says"
            raise ShardError(f"{e.path}: shard is {what} ({st.st_size} bytes, manifest says {e.nbytes})")

    def _read(self, dt, count: int, at: int, size: int = 1) -> np.ndarray:
        """``count`` items of ``dt`` (of ``size`` bytes) at byte ``at``: a view of the map, or read (ValueError past the end)."""
        if self.mm is not None:
            return np.frombuffer(self.mm, dt, count, at)
        n = count * size
        buf = bytearray(n)
        if n and os.preadv(self.fd, [buf], at) != n:
            raise ValueError("short read")
        return np.frombuffer(buf, dt)

    def _map(self) -> None:
        """Map the file (a second use): checked first, as a map cannot be read past the file's end."""
        self._stat()
        try:
            self.mm = mmap.mmap(self.fd, self.entry.nbytes, access=mmap.ACCESS_COPY)  # private: rows may be written
        except OSError as err:
            raise ShardError(f"{self.entry.path}: cannot map shard ({err.strerror})") from None
        os.close(self.fd)  # the map keeps the file
        self.fd = -1

    def fetch(self, j: int):
        """Row j: (tokens (L,), piece lengths (P,) int32, slots used, loss mask (L,) uint8 or None)."""
        if self.used and self.mm is None:
            self._map()
        self.used = True
        e, L = self.entry, self.L
        k, r = divmod(j, self.R)
        try:
            tokens = self._read(self.dt, L, self.ids_at[k] + r * L * self.isz, self.isz)
            o0, o1 = self._read(_I4, 2, self.lens_at[k] + 4 * r, 4).tolist()
            if not 0 <= o0 <= o1 <= o0 + L:
                raise ShardError(f"{e.path}: row {j}'s doc_lens offsets ({o0}, {o1}) are out of order: shard is corrupt")
            lens = self._read(_U4, o1 - o0, self.vals_at[k] + 4 * o0, 4).astype(np.int32)
            mask = None if self.mask_at is None else self._read(np.uint8, L, self.mask_at[k] + r * L)
        except (OSError, ValueError):  # past the end of the file, or before its start
            raise ShardError(f"{e.path}: row {j} lies outside the file (index.arrow's row layout does not fit it): "
                             "shard is corrupt") from None
        v = lens.tolist()
        used = sum(v)
        if used > L or (v and min(v) < 1):  # (the messages of the mapped path's checks)
            if min(v) < 1 or max(v) > L:
                raise ShardError(f"{e.path}: a doc_lens entry is outside 1..{L}: shard is corrupt")
            raise ShardError(f"{e.path}: row {j}'s doc_lens sum to {used} > seq_len {L}: shard is corrupt")
        return tokens, lens, used, mask
