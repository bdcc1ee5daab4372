"""The local engine: one process per core on this machine.

A reader thread cuts the units into chunks in order (``_read_units``); the
main thread hands chunks to worker processes (``encode_chunk``) and, when a
unit's chunks are all back, its assembly (``assemble_unit``). The data itself
goes between processes as files in the build's spill folder (spill.py): a
chunk's input from the reader to its worker, its tokens from that worker to
the unit's assembler; the main process only schedules. A ``FirstTask`` (the
build's input check) runs before any unit is assembled. Memory is bounded by
settings, not by the corpus: at most ``2 * workers + 2`` chunks are read
ahead of the tokenizers, and units are let in by a ``_Window``.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial

from ..errors import PackerError
from ..formats import PART_BYTES, Part, iter_parts_many
from ..tokenize import Encoder
from . import spill
from .plan import ChunkResult, FirstTask, Unit
from .unit import Job, assemble_unit, bounded_malloc, encode_chunk, get_encoder, init_worker


class LocalEngine:
    """Worker processes on this machine (``--engine local``); ``workers`` 0 = all cores."""

    name = "local"

    def __init__(self, workers: int = 0):
        self.workers = workers

    def run(self, todo: list[Unit], job: Job, records: dict, units: list[Unit], progress,
            first: FirstTask | None = None) -> list[str]:
        """Build the ``todo`` units; fill ``records`` {unit index: record}; return notes for the summary.
        ``first``: a task run on a worker before any unit is assembled (plan.FirstTask)."""
        bounded_malloc()
        workers = max(1, min(self.workers or os.cpu_count() or 1, _chunks_at_most(todo)))
        with _one_core_tokenizer():
            encoder = get_encoder(job.tokenizer)  # parsed once here; forked workers inherit it
            _run(todo, job, workers, encoder, records, units, progress, first)
        return []


# Events from the reader thread and the workers to the main thread.
@dataclass(frozen=True)
class ChunkRead:
    unit: Unit
    seq: int  # the chunk's place in its unit
    parts: "list[Part] | spill.SpilledParts"


@dataclass(frozen=True)
class UnitRead:
    unit: Unit
    chunks: int  # how many chunks the unit was cut into


@dataclass(frozen=True)
class ReaderDone:
    pass


@dataclass(frozen=True)
class ReaderFailed:
    error: BaseException


@dataclass(frozen=True)
class TaskDone:
    kind: str  # "chunk" | "unit"
    unit: int
    seq: int | None
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


def _read_units(todo: list[Unit], text_field: str, events: queue.Queue, slots: threading.Semaphore,
                window: "_Window", stop: threading.Event, on_bytes, max_record: int, folder: str | None = None) -> None:
    """Reader thread: cut the units into chunks, in order, onto ``events``.

    Posts a ``ChunkRead`` per chunk, taking one of ``slots`` first (so
    reading runs ahead of tokenizing by a bounded amount), a ``UnitRead``
    after each unit, then ``ReaderDone``; or ``ReaderFailed``. A unit is
    started only when ``window`` lets it in (its tokens are held until its
    shard is written, so this bounds memory whatever the corpus size).
    ``folder``: where a chunk's parts go for a pool worker (spill.put_parts); None: in the event.
    """

    def slices():
        for u in todo:
            for sl in u.slices:
                yield u, sl
            yield u, None

    def post(u, seq, parts):
        while not slots.acquire(timeout=0.1):
            if stop.is_set():
                raise _Stopped
        if folder is not None:
            parts = spill.put_parts(parts, os.path.join(folder, f"{u.index}.{seq}.in"))
        events.put(ChunkRead(u, seq, parts))

    try:
        parts, size, seq = [], 0, 0
        current = None
        for u, part in iter_parts_many(slices(), text_field, on_bytes, max_record=max_record):
            if stop.is_set():
                return
            if u is not current:  # a new unit: wait for room in the window
                while not window.enter(u.weight):
                    if stop.is_set():
                        return
                current = u
            if part is None:  # end of unit u
                if parts:
                    post(u, seq, parts)
                    seq += 1
                events.put(UnitRead(u, seq))
                parts, size, seq = [], 0, 0
                continue
            parts.append(part)
            size += part.nbytes
            if size >= PART_BYTES:
                post(u, seq, parts)
                parts, size, seq = [], 0, seq + 1
        events.put(ReaderDone())
    except _Stopped:
        return
    except BaseException as e:  # forwarded to the main thread
        events.put(ReaderFailed(e))


class _Stopped(Exception):
    pass


class _Window:
    """Units read but not yet written: at most two, or more while their input
    bytes stay under ``limit`` (small units, many cores). While the first task
    holds assembly back (``waiting``), two more units may be read: otherwise
    16 workers finish two units' chunks before Llama 3's input check (0.9 s)
    is done, and wait idle (a 480 ms gap on the GPU host)."""

    def __init__(self, limit: int, waiting: bool = False):
        self.limit, self.count, self.used = limit, 0, 0
        self.extra = 2 if waiting else 0
        self.cond = threading.Condition()

    def open(self) -> None:
        """The first task is done: back to the usual bound (the units read meanwhile drain first)."""
        with self.cond:
            self.extra = 0

    def enter(self, weight: int, timeout: float = 0.1) -> bool:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.count < 2 + self.extra or self.used + weight <= self.limit, timeout)
            if ok:
                self.count += 1
                self.used += weight
            return ok

    def leave(self, weight: int) -> None:
        with self.cond:
            self.count -= 1
            self.used -= weight
            self.cond.notify_all()


def _make_pool(workers: int, encoder: Encoder | None, job: Job) -> ProcessPoolExecutor:
    """Worker processes. Forked when this process runs no other thread: a fork
    starts in milliseconds and inherits the loaded tokenizer. Otherwise (a
    fork would copy other threads' locks) from a forkserver."""
    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        ctx = mp.get_context("fork")
    else:
        ctx = mp.get_context("forkserver" if "forkserver" in methods else "spawn")
        encoder = None  # workers parse the tokenizer themselves
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=init_worker, initargs=(encoder, job))
    pool.submit(int).result()  # start the processes now, before this process starts threads
    return pool


@contextlib.contextmanager
def _one_core_tokenizer():
    """In-process builds: keep the HF tokenizer on this thread (one worker = one core)."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old


def _encode_to(folder: str, job: Job | None, unit_index: int, seq: int, parts) -> ChunkResult:
    """``encode_chunk`` in a pool worker: its input read from the file the reader left (``parts``: a
    spill.SpilledParts), its arrays left in ``folder`` for the assembler (spill.py)."""
    if isinstance(parts, spill.SpilledParts):
        parts = parts.load()
    return spill.put(encode_chunk(job, unit_index, parts), os.path.join(folder, f"{unit_index}.{seq}"))


def _encode_here(job: Job | None, unit_index: int, seq: int, parts: list[Part]) -> ChunkResult:
    return encode_chunk(job, unit_index, parts)


def _assemble_from(job: Job | None, unit: Unit, chunks: list[ChunkResult]) -> dict:
    """``assemble_unit`` on chunks ``_encode_to`` left in files; the files are removed after."""
    record = assemble_unit(job, unit, [spill.take(c) for c in chunks])
    for c in chunks:
        spill.remove(c)
    return record


def _chunks_at_most(todo: list[Unit]) -> int:
    """An upper bound on the chunks the units make: more workers than that would idle."""
    return sum(max(1, -(-u.weight // PART_BYTES)) + len(u.slices) for u in todo)


def _run(todo, job, workers, encoder, records, units, progress, first=None) -> None:
    """Read, tokenize and assemble the ``todo`` units on ``workers`` cores; fill ``records``.
    Longer than 60 lines: one event loop whose state (tasks in flight, chunks per unit, the window) all its branches share.
    """
    total_bytes = sum(u.weight for u in units)
    before = sum(u.weight for u in units if u.index in records)
    done_bytes = [before]  # raw bytes read (parquet reports none until its unit is done)
    finished = before  # planned bytes of finished units
    docs = tokens = 0
    lock = threading.Lock()

    def on_bytes(n: int) -> None:  # called from reader threads
        with lock:
            done_bytes[0] += n

    def report() -> None:
        if progress is not None:
            shown = min(max(done_bytes[0], finished), total_bytes)
            progress(shown, docs, tokens, len(records), len(units), total_bytes)

    window = _Window(max(4 * workers * PART_BYTES, 2 * max(u.weight for u in todo)), waiting=first is not None)
    # Pool workers hand chunk tokens to the assembler in files: up to 4 bytes of ids per input byte,
    # for the window's units (two more while the first task runs). Made before the pool: it may refuse.
    folder = spill.SpillFolder(4 * (window.limit + 2 * max(u.weight for u in todo))) if workers > 1 else None
    try:
        pool = _make_pool(workers, encoder, job) if workers > 1 else None
    except BaseException:
        if folder is not None:
            folder.remove()
        raise
    task_job = None if pool is not None else job  # pool workers got the job once, at start
    ex = pool or _Inline()
    events: queue.Queue = queue.Queue()
    # Chunks read but not yet tokenized: enough that no core waits on the
    # reader, few enough that memory does not grow with the corpus.
    slots = threading.Semaphore(2 * workers + 2)
    encode, assemble = (partial(_encode_to, folder.path), _assemble_from) if folder else (_encode_here, assemble_unit)
    stop = threading.Event()
    reader = threading.Thread(target=_read_units, name="packer-reader", daemon=True,
                              args=(todo, job.read_field, events, slots, window, stop, on_bytes, job.max_record,
                                    folder.path if folder is not None else None))
    by_index = {u.index: u for u in todo}
    chunks: dict[int, dict[int, ChunkResult]] = {u.index: {} for u in todo}
    n_chunks: dict[int, int] = {}
    failure: BaseException | None = None

    def deliver(kind, u, seq):
        def cb(fut):
            events.put(TaskDone(kind, u, seq, fut))
        return cb

    in_flight = 0  # tasks submitted whose result event has not been handled

    def submit(kind, u, seq, fn, *args) -> None:
        nonlocal in_flight
        in_flight += 1
        ex.submit(fn, *args).add_done_callback(deliver(kind, u, seq))

    waiting = first is not None  # no unit is assembled before the first task's result is in
    held: list[int] = []  # units ready meanwhile

    def maybe_assemble(u: int) -> None:
        got = chunks[u]
        if n_chunks.get(u) == len(got):
            if waiting:
                held.append(u)
                return
            parts = [got[i] for i in range(len(got))]
            del chunks[u]
            submit("unit", u, None, assemble, task_job, by_index[u], parts)

    if first is not None:
        submit("first", -1, None, first.fn, task_job, *first.args)
    reader.start()
    u = None  # the unit the last event was about, for the message if a worker dies
    try:
        while len(records) < len(units):
            try:
                ev = events.get(timeout=5)
            except queue.Empty:
                # Never wait forever: with the reader finished and no task in
                # flight, no event can come any more.
                if not reader.is_alive() and in_flight == 0 and events.empty():
                    raise PackerError(
                        f"the build stalled with {len(units) - len(records)} unit(s) unfinished (an internal error; "
                        "please report it); finished units are kept: rerun with --resume"
                    ) from None
                continue
            if isinstance(ev, ChunkRead):
                u = ev.unit.index
                submit("chunk", u, ev.seq, encode, task_job, u, ev.seq, ev.parts)
            elif isinstance(ev, UnitRead):
                u = ev.unit.index
                n_chunks[u] = ev.chunks
                maybe_assemble(u)
            elif isinstance(ev, TaskDone):
                u = ev.unit
                in_flight -= 1
                res = ev.future.result()
                if ev.kind == "first":
                    first.on_result(res)  # may raise: the build stops before any unit is written
                    waiting = False
                    window.open()
                    for h in held:
                        maybe_assemble(h)
                    held.clear()
                    continue
                if ev.kind == "chunk":
                    slots.release()
                    chunks[u][ev.seq] = res
                    docs += len(res.lengths)
                    tokens += len(res.tokens)
                    maybe_assemble(u)
                else:
                    records[u] = res
                    finished += by_index[u].weight
                    window.leave(by_index[u].weight)
                report()
            elif isinstance(ev, ReaderFailed):
                raise ev.error
    except BrokenProcessPool:  # from a result, or from submitting to the pool once it broke
        failure = PackerError(
            f"a worker process died (killed, or out of memory) while building unit {u}; "
            "nothing half-written was kept: rerun with --resume"
        )
        raise failure from None
    except BaseException as e:
        failure = e
        raise
    finally:
        stop.set()
        if pool is not None:
            # On failure or Ctrl-C, queued tasks are cancelled and the workers
            # finish the task in hand (a chunk or one unit's packing: seconds)
            # and exit. Workers are never terminated: one killed while sending
            # its result leaves a half message in the result pipe, and the
            # executor's thread then waits on it forever at interpreter exit.
            pool.shutdown(wait=True, cancel_futures=True)
        if folder is not None:
            folder.remove()
        reader.join(timeout=5)


