"""The progress lines of ``packer stats`` and ``packer build`` on stderr (``BuildBar``: input bytes).

``packer stats``: bytes of shards read against the manifest's total.

On a terminal, a tqdm bar that appears once the run has taken about a second (a quick check prints
nothing); elsewhere (a log, a pipe) a plain line every ``EVERY`` seconds, the first after ``EVERY``:
long runs say how far they are, short ones and test runs print nothing. Nothing with ``-q``. It is
written to stderr only, so a closed stdout (``packer stats OUT | head -0``) never meets it, and a
closed stderr silences it instead of failing the check.
"""

from __future__ import annotations

import os
import sys
import threading
import time

EVERY = 30.0  # seconds between plain lines where stderr is not a terminal
NO_SIZE_COLUMNS, NO_SIZE_LINES = 80, 24  # a bar's terminal where it reports no size (a pty left at 0x0: docker exec, CI)


def bar(**kw):
    """A tqdm bar (``kw`` as tqdm takes them) that starts no monitor thread. The monitor outlives
    the bar, and with a second thread running the local engine cannot fork its workers (a fork
    copies other threads' locks) and starts them from a forkserver, where each parses the tokenizer
    again (Llama 3, 2 workers, 20 MB: 5.6 s against 2.65 s with -q). Whoever makes a bar updates it;
    the monitor only nudges bars that nothing updates. tqdm's setting is put back for the caller's
    own bars. On a terminal of no size (TIOCGWINSZ 0x0), a bar sized to it printed nothing at all: it is
    ``NO_SIZE_COLUMNS`` wide there."""
    from tqdm import tqdm

    if kw.get("dynamic_ncols") and _columns(kw.get("file")) == 0:
        kw.update(dynamic_ncols=False, ncols=NO_SIZE_COLUMNS, nrows=NO_SIZE_LINES)  # (0 lines: tqdm hid the bar)
    old, tqdm.monitor_interval = tqdm.monitor_interval, 0
    try:
        return tqdm(**kw)
    finally:
        tqdm.monitor_interval = old


def _columns(stream) -> int | None:
    """The width of the terminal ``stream`` is (0: one that reports no size), or None."""
    try:
        return os.get_terminal_size((stream if stream is not None else sys.stderr).fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None


class Progress:
    """Callable with the bytes read (``check(progress=...)``); ``start`` is given the total first."""

    def __init__(self, desc: str, stream=None, tty: bool | None = None):
        self.desc, self.stream = desc, stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.bar, self.done, self.total, self.shards = None, 0, 0, 0
        self.t0 = self.last = time.monotonic()
        self.lock = threading.Lock()  # (workers report from their threads)

    def start(self, total: int, shards: int) -> None:
        if self.total:  # a holdout build checked inside the main one: its bytes add to the main bar
            self.total += total
            if self.bar is not None:
                self.bar.total = self.total
            return
        self.total, self.shards = total, shards
        if self.tty:
            self.bar = bar(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=self.desc,
                           file=self.stream, dynamic_ncols=True, mininterval=0.5, leave=False, delay=1.0)

    def __call__(self, nbytes: int) -> None:
        with self.lock:
            self.done += nbytes
            if self.bar is not None:
                self.bar.update(nbytes)
                return
            now = time.monotonic()
            if not self.tty and now - self.last >= EVERY:
                self.last = now
                pct = 100.0 * self.done / self.total if self.total else 100.0
                self._say(f"packer stats: {self.desc} {self.done / 1e9:,.2f} of {self.total / 1e9:,.2f} GB ({pct:.0f}%) "
                          f"of {self.shards:,} shard(s), {now - self.t0:,.0f} s")

    def _say(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed: say nothing more
            self.tty = True

    def close(self) -> None:
        if self.bar is not None:
            try:
                self.bar.close()
            except (OSError, ValueError):
                pass
            self.bar = None


def progress_for(desc: str, quiet: bool) -> Progress | None:
    """The progress of ``packer stats`` (None with ``-q``)."""
    return None if quiet else Progress(desc)


class BuildBar:
    """``packer build``'s bars: the input files being sized (shown only if that takes over a second),
    then a bar over input bytes, with documents, tokens/s and units alongside."""

    def __init__(self):
        self.bar = None
        self.sizing = None
        self.t0 = time.perf_counter()

    def sized(self, done: int, total: int) -> None:
        if self.sizing is None:
            self.sizing = bar(total=total, unit=" files", desc="sizing inputs", file=sys.stderr, delay=1.0,
                              leave=False, dynamic_ncols=sys.stderr.isatty())
        elif total != self.sizing.total:  # the next input of several
            self.sizing.reset(total=total)
        self.sizing.update(done - self.sizing.n)
        if done >= total:
            self.sizing.close()

    def update(self, done_bytes: int, docs: int, tokens: int, units_done: int, units: int, total_bytes: int) -> None:
        """``done_bytes``: input bytes tokenized (pipeline/progress.py), so the bar's rate and ETA are the
        work's; the first call (before any unit runs) gives what a resumed build had done: counted as
        ``initial``, not as done in the first interval (which made a resume's first ETA far too short)."""
        if self.bar is None:
            tty = sys.stderr.isatty()  # in a log file, a line every 15 s rather than a redraw every 0.5 s
            self.bar = bar(total=total_bytes, initial=min(done_bytes, total_bytes), unit="B", unit_scale=True,
                           unit_divisor=1024, desc="build", file=sys.stderr, dynamic_ncols=tty,
                           mininterval=0.5 if tty else 15)
        dt = max(1e-9, time.perf_counter() - self.t0)
        self.bar.set_postfix_str(f"{docs:,} docs, {tokens / dt / 1e6:.2f}M tok/s, units {units_done}/{units}", refresh=False)
        # update() redraws at most every mininterval; the bar never runs backwards.
        self.bar.update(max(0, min(done_bytes, total_bytes) - self.bar.n))

    def close(self) -> None:
        if self.sizing is not None:
            self.sizing.close()
        if self.bar is not None:
            self.bar.close()
            self.bar = None
