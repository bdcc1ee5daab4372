"""Read-ahead: a file streamed with several reads in flight.

Slow storage (a network or FUSE mount, a Windows drive under WSL, an object
store) costs a round trip per read; ``ReadAhead`` keeps ``READ_DEPTH`` reads
in flight on a small thread pool, so the waits overlap with the parser and
the tokenizer. ``open_stream`` adds buffering and decompression on top.
"""

from __future__ import annotations

import io
import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from .compression import decompressing
from .storage import storage_for

READ_BLOCK = 4 << 20  # bytes per read of a streamed file: large, sequential
READ_DEPTH = 4  # reads in flight per streamed file
FIRST_READ = 256 << 10  # the first read of a streamed file; later ones double up to READ_BLOCK
TAPER_MIN = 64 << 10  # the smallest block near a file's end (see ReadAhead._fill)
# A local range up to this many bytes is read in the caller's thread (``direct``): a pool worker's
# 1 MB jsonl span (pipeline/engines/reader.py) took a thread pool, 8 tapered reads and their futures,
# 2 CPU-s per GB of text, where two preads do (docs/benchmarks.md). Many workers read at once there.
DIRECT_MAX = 4 << 20


def io_thread() -> None:
    """Start of each read-ahead and prefetch thread: Linux's SCHED_BATCH for it.

    A reader thread wakes each time a read returns; as a normal thread it
    preempts whatever runs on its core, which at ``--workers 1`` is the
    tokenizer. A batch thread does not preempt on waking: it runs when the
    running thread's slice ends, with the same share of the core. Reads are
    issued far enough ahead that a few ms of delay costs nothing. Through a
    FUSE mount (6,747 small files, one core) this took the build's system
    time from 1.1-1.4 s to 0.8-0.9 s and its involuntary context switches
    from 37 k to 12.5 k. No-op where there is no SCHED_BATCH.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass



class ReadAhead(io.RawIOBase):
    """A raw, read-only stream over ``path`` from ``start``, with reads in flight.

    Blocks of ``block`` bytes are read with ``os.pread`` by a small thread
    pool, up to ``depth`` at once at increasing offsets, and handed out in
    order. On a local disk that is one sequential stream read ahead of the
    parser; on storage where every read waits (a network or FUSE mount) the
    waits overlap, so one file streams at ``depth`` blocks per round trip.
    Read errors are raised in the consumer, at the block that failed.
    """

    def __init__(self, path: str, start: int = 0, limit: int | None = None, on_bytes=None,
                 block: int = READ_BLOCK, depth: int = READ_DEPTH):
        super().__init__()
        store = storage_for(path)
        self._file = store.ranged()  # local: os.pread on one fd; an object: one ranged GET per block
        self._size, self._pread = self._file.size, self._file.pread
        self._next = self._start = self._taken = start  # next offset to ask for; first; end of blocks taken
        # A ranged slice needs bytes past start+limit only to finish its last
        # line: beyond that, ask for small blocks, not whole blocks of the next slice.
        self._big_end = None if limit is None else start + limit
        self._block, self._depth = block, depth
        self._step = min(FIRST_READ, block)
        self._on_bytes = on_bytes
        self._inflight: deque = deque()
        self._buf = memoryview(b"")
        self._direct = store.local and limit is not None and limit <= DIRECT_MAX
        if self._direct:
            self._pool = None
            return
        self._pool = ThreadPoolExecutor(depth, thread_name_prefix="packer-read", initializer=io_thread)
        self._fill()

    def _fill(self) -> None:
        # Ask ahead by about twice what the consumer has taken so far (and at
        # least FIRST_READ), up to ``depth`` reads: a reader that wants only
        # the first records (a sampler) costs little, a streaming one soon
        # has depth x block in flight. Blocks double from FIRST_READ to
        # ``block`` for the same reason.
        while (len(self._inflight) < self._depth and self._next < self._size
               and self._next - self._taken < max(FIRST_READ, 2 * (self._taken - self._start))):
            n = self._step
            self._step = min(2 * self._step, self._block)
            end = self._size if self._big_end is None else self._big_end
            if self._next < end:
                # Taper: no block over 1/8 of what is left, so the last bytes
                # come in small blocks. On a slow link the parser then starts on
                # them at once, instead of waiting for one 4 MB block at the end.
                n = min(n, end - self._next, max(TAPER_MIN, (end - self._next) // 8))
            else:
                n = 1 << 16
            self._inflight.append(self._pool.submit(self._pread, n, self._next))
            self._next += n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._direct:
            return self._read_direct(b)
        while not self._buf:
            if not self._inflight:
                return 0
            data = self._inflight.popleft().result()
            if not data:  # the file shrank under us: stop here
                self._inflight.clear()
                return 0
            self._taken += len(data)
            self._fill()
            if self._on_bytes is not None:
                self._on_bytes(len(data))
            self._buf = memoryview(data)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def _read_direct(self, b) -> int:
        """One pread in this thread: up to the range's end, then TAPER_MIN at a time (the last line's rest)."""
        room = (self._big_end - self._next) if self._next < self._big_end else TAPER_MIN
        data = self._pread(min(len(b), room), self._next)
        n = len(data)
        b[:n] = data
        self._next += n
        if n and self._on_bytes is not None:
            self._on_bytes(n)
        return n

    def close(self) -> None:
        if not self.closed and self._direct:
            self._close_file()
        elif not self.closed:
            # Do not wait for reads still running (on a slow link that could
            # be seconds): the last of them closes the file when it returns.
            running = [f for f in self._inflight if not f.cancel()]
            self._pool.shutdown(wait=False)
            if not running:
                self._close_file()
            else:
                left, lock = [len(running)], threading.Lock()

                def done(_):
                    with lock:
                        left[0] -= 1
                        last = left[0] == 0
                    if last:
                        self._close_file()

                for f in running:
                    f.add_done_callback(done)
        super().close()

    def _close_file(self) -> None:
        self._file.close()



def open_stream(path: str, compression: str | None, start: int = 0,
                limit: int | None = None, on_bytes=None) -> io.BufferedReader:
    """Open ``path`` for buffered, read-ahead, decompressed reading from ``start``.

    ``limit``: bytes the caller expects to need (more are read in small steps);
    ``on_bytes(n)`` is called as raw bytes reach the reader.
    """
    ra = io.BufferedReader(ReadAhead(path, start, limit, on_bytes), buffer_size=1 << 20)
    return decompressing(ra, compression)
