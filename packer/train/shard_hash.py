"""Each shard a process reads, hashed once in the background (``PackedDataset``'s default, ``verify="background"``).

A byte flipped in a shard's token data keeps every structural check (sizes, offsets, piece lengths, ids
below vocab_size): without its checksum, a default dataset trained on it silently (issue 53.4). Hashing
every shard on open (``verify=True``) reads the whole build before the first row; here, the first time a
process maps a shard, the shard is queued, and one daemon thread hashes the queued shards (xxh3_128 of the
whole file, against the manifest's ``xxh3_128``) while the rows are read. The next read of a shard whose
hash differs raises ``ShardError`` naming it. Rows read before the hash finished are not recalled: what is
caught is everything after (at memory speed, a shard of 100 MB takes about 12 ms here).

xxhash releases the GIL while it hashes and ``readinto`` while it reads (measured: the reading thread runs
on), so the cost to the reader is the other core's time and the page cache's reads, not the GIL.

Per process: the thread is started by the process that reads (lazily: a thread started before a fork does
not exist in the child, and a DataLoader worker forked or spawned gets a fresh, idle checker: pid checked
on every queueing, ``__reduce__`` for pickling), and it ends when the queue is empty, so nothing runs
between epochs or when a process forks. Each process hashes the shards it reads: a DataLoader of N workers
reads each shard N + 1 times more (from the page cache when the build fits there). A shard on an object
store is not queued: it is hashed as it arrives in the cache (packer/io/cache.py).
"""

from __future__ import annotations

import collections
import os
import threading

from .. import shards as S
from ..errors import PackerError, ShardError

BACKGROUND = "background"
BLOCK = 8 << 20  # bytes read and hashed at a time


def verify_mode(verify) -> bool | str:
    """``verify`` as given to PackedDataset: True (every shard hashed on open), False (none), "background"."""
    if verify is True or verify is False or verify == BACKGROUND:
        return verify
    raise PackerError(f"verify must be True, False or {BACKGROUND!r}, not {verify!r}")


def problem(e) -> str | None:
    """What is wrong with shard ``e``'s bytes against its manifest checksum, or None."""
    import xxhash

    h, buf = xxhash.xxh3_128(), bytearray(BLOCK)
    view = memoryview(buf)
    try:
        with open(e.path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                h.update(view[:n])
    except OSError as err:
        return f"{e.path}: cannot read shard ({err.strerror})"
    got = h.hexdigest()
    if got != e.checksum:
        return f"{e.path}: checksum mismatch ({S.CHECKSUM} {got}, manifest says {e.checksum}): shard is corrupt"
    return None


class BackgroundHash:
    """The shards this process has queued, hashed by one daemon thread; ``failed``: shard -> message."""

    def __init__(self):
        self._pid, self._lock, self._todo, self._thread = os.getpid(), threading.Lock(), collections.deque(), None
        self._idle = threading.Condition(self._lock)
        self.failed: dict[int, str] = {}

    def __reduce__(self):  # a process of its own gets an idle checker (no thread, no lock is shipped)
        return BackgroundHash, ()

    def submit(self, k: int, e) -> None:
        """Queue shard ``k`` (its entry ``e``) for hashing; the thread starts in this process if none runs."""
        if not e.store.reads_in_place or not e.checksum:
            return
        if self._pid != os.getpid():  # forked: the parent's thread and lock are not this process's
            self.__init__()
        with self._lock:
            self._todo.append((k, e))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="packer-shard-hash", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._todo:
                    self._thread = None
                    self._idle.notify_all()
                    return
                k, e = self._todo.popleft()
            bad = problem(e)
            if bad is not None:
                self.failed[k] = bad

    def wait(self) -> None:
        """Until every shard queued so far is hashed."""
        if self._pid != os.getpid():
            return
        with self._lock:
            while self._thread is not None:
                self._idle.wait()

    def check(self, k: int) -> None:
        """``ShardError`` if shard ``k`` was found corrupt."""
        bad = self.failed.get(k)
        if bad is not None:
            raise ShardError(bad)
