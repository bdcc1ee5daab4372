"""What a build (or a repack) has done so far, counted for its progress bar and callback."""

from __future__ import annotations

import threading
from typing import Callable, Iterable


class Progress:
    """What a build has done so far, reported as ``callback(done_bytes, docs, tokens, units_done,
    units, total_bytes)``. ``read`` may be called from reader threads."""

    def __init__(self, callback: Callable | None, units: list, done: Iterable[int] = ()):
        """``units``: a build's or a repack's (each with ``index`` and ``weight``, its bytes to read)."""
        done = set(done)
        self.callback = callback
        self.units = len(units)
        self.total_bytes = sum(u.weight for u in units)
        self.units_done = len(done)
        self.finished_bytes = sum(u.weight for u in units if u.index in done)  # planned bytes of finished units
        self.read_bytes = self.finished_bytes  # raw bytes read (parquet reports none until its unit is done)
        self.docs = self.tokens = 0
        self._lock = threading.Lock()

    def read(self, n: int) -> None:
        with self._lock:
            self.read_bytes += n

    def tokenized(self, docs: int, tokens: int) -> None:
        self.docs += docs
        self.tokens += tokens
        self.report()

    def unit_done(self, unit, docs: int = 0, tokens: int = 0) -> None:
        """Unit ``unit`` (any unit: ``index``, ``weight``) is written; ``docs``/``tokens``: its counts, where no chunk reported them."""
        self.docs += docs
        self.tokens += tokens
        self.units_done += 1
        self.finished_bytes += unit.weight
        self.report()

    def report(self) -> None:
        if self.callback is not None:
            shown = min(max(self.read_bytes, self.finished_bytes), self.total_bytes)
            self.callback(shown, self.docs, self.tokens, self.units_done, self.units, self.total_bytes)
