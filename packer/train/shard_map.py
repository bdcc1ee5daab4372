"""Where a PackedDataset's rows lie: its builds' shard lists (``ShardTable``, over their indexes'
columns), a shard's entry, and the checks of a build against another and of a shard's size and
checksum. Reading a shard is packer/shards/ (mapped.py, shard_file.py: NumPy views, torch-free);
the dataset makes tensors of what they give."""

from __future__ import annotations

import os
from bisect import bisect_right
from typing import NamedTuple

import numpy as np

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import Storage
from ..io import cpu_limit
from ..shards import shard_fd


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
        return x.layouts.of(k - self.shard0[b]) if x.layouts is not None and self.stores[b].reads_in_place else None

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
    """A local shard is a regular file of the manifest's size (one open and fstat: done at first use)."""
    os.close(shard_fd(e.path, e.nbytes))


def check_checksum(e: ShardEntry) -> None:
    """The whole file hashed (xxh3_128) against the manifest (``verify=True``)."""
    got = S.file_checksum(e.path)
    if got != e.checksum:
        raise ShardError(f"{e.path}: checksum mismatch ({S.CHECKSUM} {got}, manifest says {e.checksum}): shard is corrupt")


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
