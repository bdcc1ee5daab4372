"""The local engine: one process per core on this machine (``--engine local``).

A reader thread cuts the units into chunks in order (reader.py); the main
thread hands chunks to worker processes (``encode_chunk``) and, when a unit's
chunks are all back, its assembly (``assemble_unit``). The data itself goes
between processes as files in the build's spill folder (spill.py): a chunk's
input from the reader to its worker, its tokens from that worker to the
unit's assembler; the main process only schedules. A ``FirstTask`` (the
build's backend check) runs before any unit is assembled. At most
``2 * workers + 2`` chunks are read ahead of the tokenizers, and units are let
in by a ``reader.Window``.

Workers die with the build's process; Ctrl-C, SIGTERM and SIGHUP kill them at
once (what they held is a chunk, whose tokens the stopped build drops, or a
unit's packing, which ``--resume`` does again: a unit's shard and record are
each written whole, so a killed one leaves nothing that counts). Waiting for
the task in hand took 10-17 s on a machine at load 16 (issue 55.5). A worker
that stops answering because it was stopped (SIGSTOP) fails the build with
one line instead of hanging it: packer/procs.py, the signal path that
``packer stats --workers`` shares.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import queue
import threading
import time
import uuid
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Iterator, Literal

from ... import procs
from ...errors import PackerError
from ...formats import PART_BYTES
from ...io import cpu_limit
from ...io import LEASE_THREAD
from .. import spill
from ..plan import ChunkResult, Unit
from ..unit import Job, assemble_unit, encode_chunk, encoder_for
from .base import Chunk, FirstTask, Progress, UnitEnd, chunks_at_most
from .reader import ReaderFailed, Span, Window, read_span, read_units, units_for
from .worker import JOBS, bounded_malloc, bounded_threads, one_core_tokenizer, start_pool_worker

QUIET_S = procs.QUIET_S  # seconds between looks at the workers (and the longest wait for one event)


class LocalEngine:
    """Worker processes on this machine; ``workers`` 0 = one per CPU this process may use (io/cpus.py: affinity,
    cgroup quota); 1 = everything in this process."""

    name = "local"

    def __init__(self, workers: int = 0):
        self.workers = workers
        self.notes: list[str] = []

    def run(self, todo: list[Unit], job: Job, progress: Progress,
            first: FirstTask | None = None) -> Iterator[tuple[Unit, dict]]:
        bounded_malloc()
        cpus = cpu_limit().count
        bounded_threads(cpus)  # pyarrow's pool (the reader's parquet decoding): not the host's cores past a quota
        workers = max(1, min(self.workers or cpus, chunks_at_most(todo)))
        with one_core_tokenizer():
            encoder_for(job.tokenizer)  # parsed once here; forked workers inherit it
            yield from _Scheduler(todo, job, workers, progress, first).run()


@dataclass(frozen=True)
class TaskDone:
    kind: Literal["first", "chunk", "unit"]
    unit: int  # -1 for the first task
    seq: int | None  # a chunk's place in its unit
    future: Future


class _Inline:
    """Runs tasks at once in this process: the executor for --workers 1."""

    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # delivered through the future, like a pool's
            if isinstance(e, KeyboardInterrupt):
                raise
            fut.set_exception(e)
        return fut


# Pool tasks: they name their job by key (worker.JOBS), so only the chunk's data crosses the pipe.
def _encode_task(key: str, folder: str, unit_index: int, seq: int, parts) -> ChunkResult:
    """``encode_chunk`` in a pool worker: its input read from the file the reader left (``parts``: a
    spill.SpilledParts), its arrays left in ``folder`` for the assembler (spill.py)."""
    if isinstance(parts, spill.SpilledParts):
        parts = parts.load()
    return spill.put(encode_chunk(JOBS[key], unit_index, parts), os.path.join(folder, f"{unit_index}.{seq}"))


def _span_task(key: str, folder: str, unit_index: int, seq: int, sl, last: bool) -> list[ChunkResult]:
    """A ``reader.Span`` in a pool worker: read (and decompress) here, each chunk of it encoded and its
    arrays left in ``folder`` as ``_encode_task`` leaves them; the main process never touches its bytes."""
    job = JOBS[key]
    return [spill.put(encode_chunk(job, unit_index, parts), os.path.join(folder, f"{unit_index}.{seq}.{k}"))
            for k, parts in enumerate(read_span(sl, job, last))]


def _assemble_task(key: str, unit: Unit, chunks: list[ChunkResult]) -> dict:
    """``assemble_unit`` on chunks ``_encode_task`` left in files; the files are removed after."""
    record = assemble_unit(JOBS[key], unit, [spill.take(c) for c in chunks])
    for c in chunks:
        spill.remove(c)
    return record


def _first_task(key: str, fn, args: tuple):
    return fn(JOBS[key], *args)


def make_pool(workers: int, job: Job, key: str) -> ProcessPoolExecutor:
    """Worker processes. Forked when this process runs no other thread: a fork
    starts in milliseconds and inherits the loaded tokenizer (``encoder_for``'s
    cache). Otherwise (a fork would copy other threads' locks) from a forkserver. An object-store lock's
    renewal thread does not count: a fork waits for its renewal (packer/io/object_lock.py)."""
    methods = mp.get_all_start_methods()
    fork = procs.can_fork(ignore=(LEASE_THREAD,))
    ctx = mp.get_context("fork" if fork else "forkserver" if "forkserver" in methods else "spawn")
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=start_pool_worker, initargs=(key, job))
    procs.started(pool, _watch(), hold=fork)  # start the processes now, before this process starts threads
    return pool


def _watch() -> procs.Watch:
    return procs.Watch("worker process", "the build", "finished units are kept: rerun with --resume")



class _Scheduler:
    """One build's event loop: chunks to workers, a unit's assembly when its chunks are in."""

    def __init__(self, todo: list[Unit], job: Job, workers: int, progress: Progress, first: FirstTask | None):
        self.todo, self.job, self.progress, self.first = todo, job, progress, first
        biggest = max(u.weight for u in todo)
        units = units_for(workers)
        self.window = Window(max(4 * workers * PART_BYTES, 2 * biggest), waiting=first is not None, units=units)
        # Pool workers hand chunk tokens to the assembler in files: up to 4 bytes of ids per input byte,
        # for the window's units (two more while the first task runs). Made before the pool: it may refuse.
        open_bytes = max(self.window.limit, units * biggest) + 2 * biggest
        self.folder = spill.SpillFolder(4 * open_bytes) if workers > 1 else None
        key = uuid.uuid4().hex
        try:
            self.pool = make_pool(workers, job, key) if workers > 1 else None
        except BaseException:
            self._remove_folder()
            raise
        if self.pool is not None:
            self.encode = lambda u, seq, parts: self.pool.submit(_encode_task, key, self.folder.path, u, seq, parts)
            self.read_span = lambda s: self.pool.submit(_span_task, key, self.folder.path, s.unit.index, s.seq, s.sl,
                                                        s.last)
            self.assemble = lambda unit, chunks: self.pool.submit(_assemble_task, key, unit, chunks)
            self.start_first = lambda f: self.pool.submit(_first_task, key, f.fn, f.args)
        else:
            inline = _Inline()
            self.encode = lambda u, seq, parts: inline.submit(encode_chunk, job, u, parts)
            self.assemble = lambda unit, chunks: inline.submit(assemble_unit, job, unit, chunks)
            self.start_first = lambda f: inline.submit(f.fn, job, *f.args)
        self.events: queue.Queue = queue.Queue()
        # Chunks read but not yet tokenized: enough that no core waits on the
        # reader, few enough that memory does not grow with the corpus.
        self.slots = threading.Semaphore(2 * workers + 2)
        self.stop = threading.Event()
        self.reader = threading.Thread(
            target=read_units, name="packer-reader", daemon=True,
            args=(todo, job, self.events, self.slots, self.window, self.stop, progress.read,
                  self.folder.path if self.folder is not None else None))
        self.by_index = {u.index: u for u in todo}
        # unit -> {seq: its chunks' results}: one for a Chunk, a Span's in order
        self.chunks: dict[int, dict[int, list[ChunkResult]]] = {u.index: {} for u in todo}
        self.span_bytes: dict[tuple[int, int], int] = {}  # (unit, seq) of a chunk or Span in flight -> its bytes on disk
        self.ready: collections.deque = collections.deque()  # tasks done as they were submitted (--workers 1)
        self.n_chunks: dict[int, int] = {}
        self.in_flight = 0  # tasks submitted whose result event has not been handled
        self.waiting = first is not None  # no unit is assembled before the first task's result is in
        self.held: list[int] = []  # units ready meanwhile
        self.left = len(todo)
        self.watcher = _watch()
        self.watched = time.monotonic()
        self.unit = None  # the unit the last event was about, for the message if a worker dies

    def run(self) -> Iterator[tuple[Unit, dict]]:
        """Yield (unit, record) as units finish; the first task's refusal ends the run early."""
        kill = False
        interrupts = procs.SecondInterruptKills(lambda: self.pool)
        interrupts.install()
        try:
            if self.first is not None:
                self._submit("first", -1, None, self.start_first(self.first))
            self.reader.start()
            while self.left:
                ev = self._next_event()
                if ev is None:
                    continue
                if isinstance(ev, Chunk):
                    self.unit = ev.unit.index
                    self.span_bytes[ev.unit.index, ev.seq] = ev.nbytes
                    self._submit("chunk", ev.unit.index, ev.seq, self.encode(ev.unit.index, ev.seq, ev.parts))
                elif isinstance(ev, Span):
                    self.unit = ev.unit.index
                    self.span_bytes[ev.unit.index, ev.seq] = ev.weight
                    self._submit("chunk", ev.unit.index, ev.seq, self.read_span(ev))
                elif isinstance(ev, UnitEnd):
                    self.unit = ev.unit.index
                    self.n_chunks[ev.unit.index] = ev.chunks
                    self._maybe_assemble(ev.unit.index)
                elif isinstance(ev, TaskDone):
                    if not self._task_done(ev):
                        return
                    if ev.kind == "unit":
                        yield self.by_index[ev.unit], ev.future.result()
                elif isinstance(ev, ReaderFailed):
                    raise ev.error
        except BrokenProcessPool:  # from a result, or from submitting to the pool once it broke
            raise PackerError(f"a worker process died (killed, or out of memory) while building unit {self.unit}; "
                              "nothing half-written was kept: rerun with --resume") from None
        except (procs.WorkerStopped, KeyboardInterrupt):  # (KeyboardInterrupt: Ctrl-C, SIGTERM, SIGHUP too)
            kill = True
            raise
        finally:
            try:
                self._close(kill)
            finally:
                interrupts.restore()

    def _next_event(self):
        """The next event, or None after a quiet period (having checked that one can still come)."""
        if self.ready:
            return self.ready.popleft()
        if time.monotonic() - self.watched >= QUIET_S:
            self.watch()
        try:
            return self.events.get(timeout=QUIET_S)
        except queue.Empty:
            # Never wait forever: with the reader finished and no task in flight, no event can come any more.
            if not self.reader.is_alive() and self.in_flight == 0 and self.events.empty():
                raise PackerError(f"the build stalled with {self.left} unit(s) unfinished (an internal error; please "
                                  "report it); finished units are kept: rerun with --resume") from None
            return None

    def watch(self) -> None:
        """Every ``QUIET_S``: a worker found stopped (SIGSTOP) ``procs.STOPPED_CHECKS`` times in a row fails the
        build (the others may go on for a while, but the units it holds can never finish)."""
        self.watched = time.monotonic()
        self.watcher.look(self.pool)

    def _submit(self, kind: str, u: int, seq: int | None, fut: Future) -> None:
        self.in_flight += 1
        if fut.done():  # run here (--workers 1): told next, not after the chunks read ahead meanwhile (its
            self.ready.append(TaskDone(kind, u, seq, fut))  # progress came 4 chunks at a time)
        else:
            fut.add_done_callback(lambda f: self.events.put(TaskDone(kind, u, seq, f)))

    def _maybe_assemble(self, u: int) -> None:
        got = self.chunks[u]
        if self.n_chunks.get(u) != len(got):
            return
        if self.waiting:
            self.held.append(u)
            return
        parts = [c for i in range(len(got)) for c in got[i]]
        del self.chunks[u]
        self._submit("unit", u, None, self.assemble(self.by_index[u], parts))

    def _task_done(self, ev: TaskDone) -> bool:
        """Handle a finished task; False when the first task's result stops the build."""
        self.unit = ev.unit
        self.in_flight -= 1
        res = ev.future.result()
        if ev.kind == "first":
            if not self.first.accept(res):  # (may raise: the build stops before any unit is written)
                return False
            self.waiting = False
            self.window.open()
            for h in self.held:
                self._maybe_assemble(h)
            self.held.clear()
            return True
        if ev.kind == "chunk":
            self.slots.release()
            res = res if isinstance(res, list) else [res]
            self.chunks[ev.unit][ev.seq] = res
            self._maybe_assemble(ev.unit)
            self.progress.tokenized(sum(len(r.lengths) for r in res), sum(len(r.tokens) for r in res),
                                    self.by_index[ev.unit], self.span_bytes.pop((ev.unit, ev.seq), 0))
        else:
            unit = self.by_index[ev.unit]
            self.left -= 1
            self.window.leave(unit.weight)
            self.progress.unit_done(unit)
        return True

    def _close(self, kill: bool) -> None:
        self.stop.set()
        if self.pool is not None:
            # On a failure, queued tasks are cancelled and the workers finish the task in hand (a chunk
            # or one unit's packing: seconds, more on a busy machine) and exit; on a stop (Ctrl-C, SIGTERM,
            # SIGHUP) or a stopped worker they are killed at once (procs.give_up).
            procs.close(self.pool, kill_first=kill)
        self._remove_folder()
        self.reader.join(timeout=0.5 if kill else 5)  # (it leaves at its next chunk; a daemon, it ends with the process)

    def _remove_folder(self) -> None:
        if self.folder is not None:
            self.folder.remove()
