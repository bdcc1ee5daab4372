"""The local engine's reader thread: units cut into chunks, in order, at a bounded distance ahead.

Memory is bounded by settings, not by the corpus: at most ``slots`` chunks
are read ahead of the tokenizers, and a unit is started only when the
``Window`` lets it in (its tokens are held until its shard is written).
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass

from .. import spill
from .base import Chunk, UnitEnd, cut_chunks


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


def units_for(workers: int) -> int:
    """Units a build on ``workers`` cores keeps open: 2, plus one per 4 workers (6 at 16)."""
    return 2 + workers // 4


def read_units(todo, job, events: queue.Queue, slots: threading.Semaphore, window: Window,
               stop: threading.Event, on_bytes, folder: str | None = None) -> None:
    """Reader thread: post a ``Chunk`` per chunk of ``todo`` onto ``events`` (taking one of
    ``slots`` first), a ``UnitEnd`` after each unit, then ``ReaderDone``; or ``ReaderFailed``.
    ``folder``: where a chunk's parts go for a pool worker (spill.put_parts); None: in the event."""

    def enter(u) -> None:
        while not window.enter(u.weight):
            if stop.is_set():
                raise Stopped

    try:
        for ev in cut_chunks(todo, job.read_field, job.output.max_record_bytes, on_bytes, on_unit=enter):
            if stop.is_set():
                return
            if isinstance(ev, Chunk):
                while not slots.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                if folder is not None:
                    parts = spill.put_parts(ev.parts, os.path.join(folder, f"{ev.unit.index}.{ev.seq}.in"))
                    ev = Chunk(ev.unit, ev.seq, parts)
            events.put(ev)
        events.put(ReaderDone())
    except Stopped:
        return
    except BaseException as e:  # forwarded to the main thread
        events.put(ReaderFailed(e))


__all__ = ["Chunk", "UnitEnd", "ReaderDone", "ReaderFailed", "Window", "read_units"]
