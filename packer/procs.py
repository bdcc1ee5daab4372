"""Worker processes under signals: the one path of every process pool packer starts.

Used by the build's pool (``pipeline/engines/local.py``) and by ``packer stats --workers``
(``inspect/stats.py``); a leaf beside ``errors`` and ``faults``, so every stage may use it.

- A worker asks the kernel for SIGKILL when its parent dies (``die_with_parent``): SIGTERM,
  SIGKILL or a crash of the main process leaves no worker running.
- Ctrl-C reaches the whole process group. A worker does not stop on it
  (``start_worker``): the main process decides. ``packer stats`` stops the pool with ``close``:
  queued tasks are cancelled, the task in hand finishes; a second Ctrl-C meanwhile kills the
  workers. A build kills them at once (``give_up``): a task in hand took 10-17 s at load 16. A worker
  started with ``note_interrupt`` only notes it (``interrupted``), so a task that polls it can end
  early (stats' checkers do, between shards); ``close(nudge=True)`` tells the workers too, for a
  Ctrl-C sent to the main process alone.
- A worker found stopped (SIGSTOP, Ctrl-Z) ``STOPPED_CHECKS`` looks in a row, ``QUIET_S`` apart,
  ends the run in one line (``Watch``); a dead one breaks the pool (``BrokenProcessPool``), which
  the caller turns into one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from .errors import PackerError

PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)
QUIET_S = 5.0  # seconds between looks at the workers
STOPPED_CHECKS = 2  # looks in a row that find a worker stopped before the run fails

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_INTERRUPTED: list = []  # in a worker, non-empty once Ctrl-C reached it (``note_interrupt``): no lock in a handler


class WorkerStopped(PackerError):
    """A worker process found stopped (SIGSTOP): the run cannot go on without it."""


def can_fork(ignore: tuple = ()) -> bool:
    """Whether this process may fork workers: POSIX, and no thread running but this one and those
    named in ``ignore`` (a fork copies other threads' locks; a thread listed here must make its
    forks safe itself, as an object-store lease's renewal does: packer/io/object_lock.py)."""
    import multiprocessing as mp

    others = [t for t in threading.enumerate() if t is not threading.current_thread() and t.name not in ignore]
    return "fork" in mp.get_all_start_methods() and not others


@contextlib.contextmanager
def starting():
    """Hold Ctrl-C, SIGTERM and SIGHUP while the block forks workers; they arrive after it. (Raised
    inside a fork's own after-fork hooks, logging's among them, a KeyboardInterrupt is printed as
    "Exception ignored" and lost: measured, the run then went on to exit 0.) The workers let them
    through again (``start_worker``)."""
    held = hasattr(signal, "pthread_sigmask")
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def started(pool, watch: "Watch", hold: bool = True) -> None:
    """Start ``pool``'s workers now, with its first task (a fork-based pool forks them there), Ctrl-C
    held while they fork (``starting``); then wait for that task as for any other, watched. Waited for
    unwatched, with Ctrl-C still held, a worker stopped at its start (SIGSTOP under load, as the tests
    send it) hung the run for good. Given up on any failure (``give_up``). ``hold``: False for a pool that
    does not fork (forkserver, spawn)."""
    from concurrent.futures import wait

    with starting() if hold else contextlib.nullcontext():
        first = pool.submit(int)
    try:
        while not wait([first], timeout=QUIET_S).done:
            watch.look(pool)
        first.result()
    except BaseException:
        give_up(pool)
        raise


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere a no-op).

    Without it a second Ctrl-C, a SIGTERM or a SIGKILL to the main process left workers running
    for minutes (a build's held the lock on OUT: an flock is shared with every forked child).
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the request was in place
        os._exit(1)


def start_worker(note_interrupt: bool = False) -> None:
    """A pool worker's signals, first thing in the worker: death with the parent; Ctrl-C ignored
    (or noted, ``interrupted``); SIGTERM and SIGHUP back to their defaults. (A forked worker
    inherits the CLI's SIGTERM handler, but must die at once when a broken pool terminates it,
    not report an exception into a pipe nobody reads.)"""
    die_with_parent()
    signal.signal(signal.SIGINT, (lambda s, f: _INTERRUPTED.append(s)) if note_interrupt else signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # forked inside ``starting``
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def interrupted() -> bool:
    """In a worker started with ``note_interrupt``: whether Ctrl-C has reached it."""
    return bool(_INTERRUPTED)


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, Ctrl-Z): state T in /proc (Linux; else False)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def ended(pid: int) -> bool:
    """Whether process ``pid`` has ended: gone, or a zombie not yet reaped (Linux /proc; else False)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return os.path.exists("/proc/self/stat")
    except (OSError, IndexError):
        return False


def pids(pool) -> list[int]:
    """The worker processes of a ``ProcessPoolExecutor`` (none for another executor)."""
    return list(getattr(pool, "_processes", None) or {})


class Watch:
    """Looks at a pool's workers; ``look`` raises ``WorkerStopped`` once one is found stopped
    ``STOPPED_CHECKS`` looks in a row, and ``BrokenProcessPool`` once one is found ended as many looks in a
    row that the pool has not noticed (it died half-way through sending a result: the pool's manager
    thread waits for the rest of it and never looks at the worker). ``what``: how to name a worker;
    ``run``: what cannot go on; ``then``: what the user may do."""

    def __init__(self, what: str, run: str, then: str):
        self.what, self.run, self.then, self.quiet, self.dead = what, run, then, 0, 0

    def look(self, pool) -> None:
        found = [pid for pid in pids(pool) if stopped(pid)]
        self.quiet = self.quiet + 1 if found else 0
        if self.quiet >= STOPPED_CHECKS:
            raise WorkerStopped(f"{self.what} {found[0]} is stopped (SIGSTOP or Ctrl-Z) and {self.run} cannot go on "
                                f"without it; {self.then}")
        gone = [pid for pid in pids(pool) if ended(pid)]
        self.dead = self.dead + 1 if gone else 0
        if self.dead >= STOPPED_CHECKS:
            from concurrent.futures.process import BrokenProcessPool

            raise BrokenProcessPool(f"{self.what} {gone[0]} ended")


def kill(pool) -> None:
    """SIGKILL every worker of ``pool`` (a stopped one too)."""
    for pid in pids(pool):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def give_up(pool) -> None:
    """Kill ``pool``'s workers and let the pool go without waiting on it for ever. Its manager thread may be
    reading a result that a worker was stopped (or killed) half-way through sending: the parent holds the
    result pipe's other write end, so no end-of-file comes, and ``shutdown(wait=True)``, like the
    interpreter's exit, waited on that thread for ever (a checker SIGSTOPped under load hung ``packer
    stats``). Closing the parent's write end once the workers are dead ends that read, the pool breaks as
    for a dead worker, and the thread is waited on ``QUIET_S`` at most."""
    thread, results = getattr(pool, "_executor_manager_thread", None), getattr(pool, "_result_queue", None)
    workers = list((getattr(pool, "_processes", None) or {}).values())
    kill(pool)
    for w in workers:  # (SIGKILL ends even a stopped process; its end of the pipe closes as it dies)
        with contextlib.suppress(Exception):
            w.join(QUIET_S)
    with contextlib.suppress(Exception):
        results._writer.close()
    pool.shutdown(wait=False, cancel_futures=True)
    if thread is not None:
        thread.join(QUIET_S)


class SecondInterruptKills:
    """From ``install()`` to ``restore()`` (the main thread only): a first Ctrl-C raises KeyboardInterrupt as
    Python's own handler does; every later one kills ``pool_of()``'s workers and raises nothing. So the first
    one's clean-up (queued tasks cancelled, the task in hand finished, the spill folder removed) is never cut
    short half-way by the second: cut short before the pool was shut down, its workers went on through the
    queued tasks and the interpreter's exit waited for them (the Ctrl-C tests timed out under load)."""

    def __init__(self, pool_of):
        self.pool_of, self.seen, self.old = pool_of, 0, None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._on_interrupt)

    def restore(self) -> None:
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
            self.old = None

    def _on_interrupt(self, signum, frame) -> None:
        self.seen += 1
        if self.seen == 1:
            raise KeyboardInterrupt
        pool = self.pool_of()
        if pool is not None:
            kill(pool)


def close(pool, kill_first: bool = False, nudge: bool = False) -> None:
    """Stop ``pool``: queued tasks cancelled, the workers finish the task in hand and exit. They are
    killed only where waiting is not possible: ``kill_first`` (a stopped or dead worker), or a second
    Ctrl-C while they finish (which is raised after). One killed while it sends its result can leave
    half a message in the result pipe, so a pool is killed only when it is given up. ``nudge``: Ctrl-C
    the workers first (those that note it end their task early)."""
    if kill_first:
        give_up(pool)
        return
    if nudge:
        for pid in pids(pool):
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass
    try:
        pool.shutdown(wait=True, cancel_futures=True)
    except KeyboardInterrupt:
        kill(pool)
        raise
