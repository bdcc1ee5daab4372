"""The local engine's reader thread: units cut into chunks, in order, at a bounded distance ahead.

Memory is bounded by settings, not by the corpus: at most ``slots`` chunks
are read ahead of the tokenizers, and a unit is started only when the
``Window`` lets it in (its tokens are held until its shard is written).

With a pool, jsonl on local disk is not read here at all: the thread posts
``Span``s, byte ranges of a plain file (``RANGE_BYTES``) or a whole small
compressed one, and the worker that gets one reads, decompresses, parses and
encodes it (``read_span``). Read here, every input byte went through this one
thread (readline, pickle, a write to the spill folder): 3 CPU-s per GB on the
2-core dev box, one core's worth at ~330 MB/s, the 0.41 of the encode-only
ceiling a billion-token build reached on 16 cores (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, replace

from ...formats import PART_BYTES, Slice, iter_parts
from ...io import is_uri
from .. import spill
from ..plan import Unit
from .base import Chunk, UnitEnd, cut_chunks, input_bytes

RANGE_BYTES = 1 << 20  # plain jsonl per Span: 4 chunks, few enough tasks that scheduling stays ~0.1 CPU-s a GB
WHOLE_MAX = 4 << 20  # on disk: a compressed jsonl slice up to this is one Span (~20 MB of text, ~0.25 s of a core)
CHANGED = "changed while it was read"  # in a truncated Skip's where: the file is not as discovered


@dataclass(frozen=True)
class ReaderDone:
    pass


@dataclass(frozen=True)
class ReaderFailed:
    error: BaseException


class Stopped(Exception):
    """The build is stopping: the reader leaves at once."""


class Window:
    """Units read but not yet written: at most ``units``, or more while their input
    bytes stay under ``limit`` (small units, many cores). While the first task
    holds assembly back (``waiting``), two more units may be read: otherwise
    16 workers finish two units' chunks before Llama 3's input check (0.9 s)
    is done, and wait idle (a 480 ms gap on the GPU host).

    ``units`` grows with the workers (``units_for``): a unit is packed and written
    by one worker while the others tokenize the next units' chunks, and with only
    two units open, 16 workers ran out of chunks during every 64 MB unit's
    assembly (8.9 of 16 cores busy on the GPU host, 0.65 of the encode-only
    ceiling, docs/benchmarks.md)."""

    def __init__(self, limit: int, waiting: bool = False, units: int = 2):
        self.limit, self.count, self.used, self.units = limit, 0, 0, units
        self.extra = 2 if waiting else 0
        self.cond = threading.Condition()

    def open(self) -> None:
        """The first task is done: back to the usual bound (the units read meanwhile drain first)."""
        with self.cond:
            self.extra = 0

    def enter(self, weight: int, timeout: float = 0.1) -> bool:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.count < self.units + self.extra or self.used + weight <= self.limit,
                                    timeout)
            if ok:
                self.count += 1
                self.used += weight
            return ok

    def leave(self, weight: int) -> None:
        with self.cond:
            self.count -= 1
            self.used -= weight
            self.cond.notify_all()


@dataclass(frozen=True)
class Span:
    """Part of one unit's input that a pool worker reads itself (``read_span``); ``seq``: its place
    among the unit's chunks and spans; ``last``: the slice's last span (the one that reports a file
    changed since it was found); ``weight``: its bytes on disk (for progress)."""

    unit: Unit
    seq: int
    sl: Slice
    last: bool
    weight: int


def spans_of(sl: Slice) -> list[Slice] | None:
    """``sl`` as the pieces workers read themselves: byte ranges of a plain local jsonl file (a record
    belongs to the range holding its first byte, as for slices), or a small compressed one whole; None
    where the reader thread reads it (other formats, objects, big compressed files, --limit's cut)."""
    f = sl.file
    if f.format != "jsonl" or sl.max_items is not None or is_uri(f.path):
        return None
    if f.compression is not None:
        return [sl] if f.size <= WHOLE_MAX else None
    return [replace(sl, start=a, end=min(a + RANGE_BYTES, sl.end)) for a in range(sl.start, sl.end, RANGE_BYTES)] or [sl]


def read_span(sl: Slice, job, last: bool = True):
    """A span's Parts (read here: in the worker), in groups of about PART_BYTES, as ``cut_chunks``
    cuts them. A span that is not its slice's last drops the ``truncated`` tail that says the file
    changed (the last span checks it too): a slice counts a changed file once, however it is cut."""
    group, size = [], 0
    for part in iter_parts(sl, job.read_field, max_record=job.output.max_record_bytes):
        if not last and part.tail is not None and part.tail.reason == "truncated" and CHANGED in part.tail.where:
            part = replace(part, tail=None)
            if not part.items:
                continue
        group.append(part)
        size += part.nbytes
        if size >= PART_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


def _delegated(u: Unit) -> list[tuple[Slice, bool]] | None:
    """The spans of unit ``u`` when every slice of it can be read by the workers, else None."""
    out = []
    for sl in u.slices:
        spans = spans_of(sl)
        if spans is None:
            return None
        out += [(s, k == len(spans) - 1) for k, s in enumerate(spans)]
    return out


def units_for(workers: int) -> int:
    """Units a build on ``workers`` cores keeps open: 2, plus one per 4 workers (6 at 16)."""
    return 2 + workers // 4


def read_units(todo, job, events: queue.Queue, slots: threading.Semaphore, window: Window,
               stop: threading.Event, on_bytes, folder: str | None = None) -> None:
    """Reader thread: post a ``Chunk`` per chunk of ``todo`` onto ``events`` (taking one of
    ``slots`` first), a ``UnitEnd`` after each unit, then ``ReaderDone``; or ``ReaderFailed``.
    ``folder``: where a chunk's parts go for a pool worker (spill.put_parts); None: in the event.
    With a pool (``folder``), a unit whose slices workers can read (``spans_of``) is posted as
    ``Span``s instead, each taking a slot; units read here and units of spans keep their order."""

    def enter(u) -> None:
        while not window.enter(u.weight):
            if stop.is_set():
                raise Stopped

    def slot() -> None:
        while not slots.acquire(timeout=0.1):
            if stop.is_set():
                raise Stopped

    read, lock = [0, 0], threading.Lock()  # bytes read so far, and by the last chunk posted

    def counted(n: int) -> None:  # (also from the threads that read small files ahead)
        with lock:
            read[0] += n
        if on_bytes is not None:
            on_bytes(n)

    try:
        for run, spans in _runs(todo, folder is not None):
            if spans is not None:  # one unit, read by the workers
                enter(run[0])
                for seq, (sl, last) in enumerate(spans):
                    if stop.is_set():
                        return
                    slot()
                    events.put(Span(run[0], seq, sl, last, sl.end - sl.start if sl.file.compression is None else sl.file.size))
                events.put(UnitEnd(run[0], len(spans)))
                continue
            for ev in cut_chunks(run, job.read_field, job.output.max_record_bytes, counted, on_unit=enter):
                if stop.is_set():
                    return
                if isinstance(ev, Chunk):
                    slot()
                    with lock:
                        nbytes, read[1] = input_bytes(ev.parts, read[0] - read[1]), read[0]
                    parts = ev.parts if folder is None else \
                        spill.put_parts(ev.parts, os.path.join(folder, f"{ev.unit.index}.{ev.seq}.in"))
                    ev = Chunk(ev.unit, ev.seq, parts, nbytes)
                events.put(ev)
        events.put(ReaderDone())
    except Stopped:
        return
    except BaseException as e:  # forwarded to the main thread
        events.put(ReaderFailed(e))


def _runs(todo, pool: bool):
    """``todo`` in order as (units read here, None) runs and ([unit], its spans) for units the workers read."""
    run = []
    for u in todo:
        spans = _delegated(u) if pool else None
        if spans is None:
            run.append(u)
            continue
        if run:
            yield run, None
            run = []
        yield [u], spans
    if run:
        yield run, None


__all__ = ["Chunk", "UnitEnd", "Span", "ReaderDone", "ReaderFailed", "Window", "read_units", "read_span", "spans_of"]
