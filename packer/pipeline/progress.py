"""What a build (or a repack) has done so far, counted for its progress bar and callback."""

from __future__ import annotations

import threading
from typing import Callable, Iterable


class Progress:
    """What a build has done so far, reported as ``callback(done_bytes, docs, tokens, units_done, units,
    total_bytes)``. ``done_bytes``: the input bytes whose documents are tokenized (finished units whole,
    others chunk by chunk), so a bar over them moves inside one large unit and its rate (and so its ETA)
    is that of the work, not of the reader's look-ahead (bytes read counted as done ran up to a megabyte
    a worker ahead, and a whole small build at once). Every figure only grows. ``read`` may be called from
    reader threads."""

    def __init__(self, callback: Callable | None, units: list, done: Iterable[int] = ()):
        """``units``: a build's or a repack's (each with ``index`` and ``weight``, its bytes to read)."""
        done = set(done)
        self.callback = callback
        self.units = len(units)
        self.total_bytes = sum(u.weight for u in units)
        self.units_done = len(done)
        self.finished_bytes = sum(u.weight for u in units if u.index in done)  # planned bytes of finished units
        self.partial: dict[int, int] = {}  # unit index -> its bytes tokenized so far (at most its weight)
        self.read_bytes = 0  # raw bytes the reader has read (ahead of the work: not counted as done)
        self.docs = self.tokens = 0
        self._lock = threading.Lock()

    def read(self, n: int) -> None:
        with self._lock:
            self.read_bytes += n

    def done_bytes(self) -> int:
        return min(self.finished_bytes + sum(self.partial.values()), self.total_bytes)

    def tokenized(self, docs: int, tokens: int, unit=None, nbytes: int = 0) -> None:
        """A chunk of ``unit`` is tokenized: ``nbytes`` of its input (0 where the reader cannot tell: parquet
        reports its bytes with its unit), ``docs`` and ``tokens`` in it."""
        self.docs += docs
        self.tokens += tokens
        if unit is not None and nbytes:
            self.partial[unit.index] = min(unit.weight, self.partial.get(unit.index, 0) + nbytes)
        self.report()

    def unit_done(self, unit, docs: int = 0, tokens: int = 0) -> None:
        """Unit ``unit`` (any unit: ``index``, ``weight``) is written; ``docs``/``tokens``: its counts, where no chunk reported them."""
        self.docs += docs
        self.tokens += tokens
        self.units_done += 1
        self.partial.pop(unit.index, None)
        self.finished_bytes += unit.weight
        self.report()

    def report(self) -> None:
        if self.callback is not None:
            self.callback(self.done_bytes(), self.docs, self.tokens, self.units_done, self.units, self.total_bytes)
