"""Build: raw text in, verified shards and a manifest out.

The unit of output is a ``Unit``: a few slices of input, about ``unit_bytes``
of it, that become one shard plus a unit record, deterministically. The
grain of parallelism is smaller, a chunk of about 1 MB of one unit's records
(see "The work" below). Everything else follows from that:

- parallelism: chunks are tokenized on any core, N workers = N cores busy
  even when the corpus is one unit; units are packed as they complete;
- byte-identical output whatever ``--workers`` is: a unit's shard depends on
  its input and the settings alone;
- crash-resume: a unit whose record and shard exist is finished; ``--resume``
  runs only the others;
- the manifest is assembled from unit records last, so a build folder with a
  manifest is complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import queue
import shutil
import signal
import threading
import time
from collections import Counter
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import numpy as np

from . import faults, storage
from . import shards as S
from .errors import PackerError
from .pack import MODES, pack
from .sources import PART_BYTES, Part, Skip, Slice, discover, iter_parts_many, parse_part, plan_slices, strict_error
from .tiktoken_backend import sample_texts
from .tokenizer import Encoder, TokenizerInfo, choose_backend, resolve_tokenizer

DEFAULT_UNIT_BYTES = 64 << 20
MAX_EXAMPLES = 5  # file:line examples kept per skip reason


@dataclass(frozen=True)
class BuildConfig:
    """What ``packer build`` was asked to do. Fields marked *output* change the
    bytes written; the rest only change how fast or how loudly."""

    inputs: tuple[str, ...]
    out: str
    seq_len: int = 2048  # output: slots per row
    tokenizer: str | None = None  # output: None = built-in bytes
    text_field: str = "text"  # output
    pack: str = "bfd"  # output
    eos: bool = True  # output
    eos_token: str | None = None  # output
    unit_bytes: int = DEFAULT_UNIT_BYTES  # output: input bytes per work unit
    workers: int = 0  # 0 = all cores
    strict: bool = False
    overwrite: bool = False
    resume: bool = False
    quiet: bool = False
    tokenizer_backend: str = "auto"  # "auto" | "hf" | "tiktoken": speed only, the ids are the same
    engine: str = "local"  # "local" (worker processes) | "ray" (Ray tasks, packer/engine_ray.py): same bytes
    ray_address: str | None = None  # engine "ray": a running cluster (HOST:PORT, auto, ray://...); None = start one here


@dataclass(frozen=True)
class Unit:
    index: int
    slices: tuple[Slice, ...]
    weight: int  # input bytes, for progress and ETA


@dataclass(frozen=True)
class Job:
    """The settings every unit needs; picklable, sent once to each worker."""

    out: str
    seq_len: int
    pack: str
    text_field: str
    strict: bool
    tokenizer: TokenizerInfo
    dtype: str


@dataclass
class BuildResult:
    manifest: dict
    seconds: float
    units_run: int
    units_skipped: int
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------
# Planning.


def plan_units(slices: list[tuple[Slice, int]], unit_bytes: int) -> list[Unit]:
    """Group consecutive slices into units of about ``unit_bytes``."""
    units, cur, acc = [], [], 0
    for sl, w in slices:
        if cur and acc + w > unit_bytes:
            units.append(Unit(len(units), tuple(cur), acc))
            cur, acc = [], 0
        cur.append(sl)
        acc += w
    if cur:
        units.append(Unit(len(units), tuple(cur), acc))
    return units


def _settings(cfg: BuildConfig, tok: TokenizerInfo, units: list[Unit]) -> dict:
    plan = hashlib.sha256()
    for u in units:
        for sl in u.slices:
            plan.update(f"{u.index}\0{sl.file.path}\0{sl.file.size}\0{sl.start}\0{sl.end}\n".encode())
    return {
        "seq_len": cfg.seq_len,
        "pack": cfg.pack,
        "eos": cfg.eos,
        "text_field": cfg.text_field,
        "unit_bytes": cfg.unit_bytes,
        "tokenizer": tok.name,
        "tokenizer_fingerprint": tok.fingerprint,
        "input_plan": plan.hexdigest(),
    }


# --------------------------------------------------------------------------
# The work. A unit is read in order by the main process and cut into chunks
# (about PART_BYTES of raw records each); any core parses and tokenizes a
# chunk (``encode_chunk``); when all chunks of a unit are back, one core packs
# and writes its shard (``assemble_unit``). Chunks are the grain of
# parallelism, so one big unit (one .jsonl.zst file, or a corpus smaller
# than --unit-mb) still keeps every core busy, and the output depends only on
# the units, never on which core did what.

_encoder: Encoder | None = None
_job: Job | None = None  # in pool workers: the build's settings, received once
_in_pool = False  # True in pool worker processes


@dataclass(frozen=True)
class ChunkResult:
    """One chunk, tokenized: every document's ids back to back, in order."""

    tokens: np.ndarray  # (sum(lengths),) in the shard dtype, EOS included
    lengths: np.ndarray  # (documents,) int64; 0 for a document that encoded to nothing
    skipped: tuple[Skip, ...]  # records not used, in input order
    nbytes: int  # raw input bytes of the chunk


def _bounded_malloc() -> None:
    """Fix glibc's mmap threshold at 128 KB in this process.

    By default glibc raises the threshold each time a large block is freed,
    so after a few units the 0.1-50 MB token buffers come from the heap,
    which fragments and keeps growing (we measured 250-300 MB in the main
    process against 60-90 MB with the threshold fixed). Fixed, every large
    buffer is its own mapping and goes back to the OS when freed. No-op
    where there is no glibc.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, 128 << 10)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def _init_worker(encoder: Encoder | None, job: Job) -> None:
    global _encoder, _in_pool, _job
    _job = job  # tasks then carry only their data: the Job holds the whole tokenizer JSON (MBs)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    _bounded_malloc()
    # One core per worker: the HF tokenizer must not fan out a batch over threads.
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _in_pool = True
    if encoder is not None:  # inherited through fork: no tokenizer to parse again
        _encoder = encoder


def _get_encoder(info: TokenizerInfo) -> Encoder:
    global _encoder
    if _encoder is None or (_encoder.info is not info and _encoder.info != info):
        _encoder = Encoder(info)
    return _encoder


def encode_chunk(job: Job | None, unit_index: int, parts: list[Part]) -> ChunkResult:
    """Parse and tokenize one chunk of a unit (runs on any core; ``job`` None = the worker's)."""
    job = job or _job
    faults.set_unit(unit_index)
    enc = _get_encoder(job.tokenizer)
    field = tuple(job.text_field.split("."))
    texts: list[str] = []
    skipped: list[Skip] = []
    for part in parts:
        for rec in parse_part(part, field):
            if type(rec) is str:
                texts.append(rec)
            elif job.strict:
                raise strict_error(rec)
            else:
                skipped.append(rec)
    faults.point("read")
    ids, lengths = enc.encode_flat(texts) if texts else (np.zeros(0, np.uint32), np.zeros(0, np.int64))
    faults.point("tokenize")
    return ChunkResult(ids.astype(job.dtype, copy=False), lengths, tuple(skipped), sum(p.nbytes for p in parts))


def assemble_unit(job: Job | None, unit: Unit, chunks: list[ChunkResult]) -> dict:
    """Pack one unit's documents into rows and write its shard; return its record (also on disk)."""
    job = job or _job
    faults.set_unit(unit.index)
    skipped: Counter = Counter()
    examples: dict[str, list[str]] = {}

    def skip(rec: Skip) -> None:
        if job.strict:
            raise strict_error(rec)
        skipped[rec.reason] += 1
        ex = examples.setdefault(rec.reason, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(rec.where)

    for c in chunks:
        for rec in c.skipped:
            skip(rec)
    # Per document: its length, its chunk, where it starts in that chunk's
    # tokens. (The chunks are not concatenated: that would be one more copy
    # of the unit's tokens in memory.)
    lengths = np.concatenate([c.lengths for c in chunks]) if chunks else np.zeros(0, np.int64)
    doc_chunk = np.repeat(np.arange(len(chunks)), [len(c.lengths) for c in chunks])
    doc_start = np.concatenate([np.cumsum(c.lengths) - c.lengths for c in chunks]) if chunks else lengths

    # Documents that encode to nothing (possible only with --no-eos) cannot be placed.
    if len(lengths) and lengths.min() == 0:
        for i in np.nonzero(lengths == 0)[0]:
            skip(Skip("no_tokens", f"unit {unit.index} document {i}"))
        keep = lengths > 0
        lengths, doc_chunk, doc_start = lengths[keep], doc_chunk[keep], doc_start[keep]

    layout = pack(lengths, job.seq_len, job.pack)
    faults.point("pack")
    out = _gather([c.tokens for c in chunks], doc_chunk, doc_start, layout, job)
    table = S.shard_table(out, job.seq_len, layout.row, layout.length, layout.doc, layout.offset, layout.num_rows)
    data = S.table_bytes(table)
    del out, table
    name = f"{S.SHARD_DIR}/{unit.index:06d}.arrow"
    storage.put(job.out, name, data)  # a local folder or an object store (storage.py)
    faults.point("write")

    pieces_per_doc = np.bincount(layout.doc, minlength=len(lengths)) if len(lengths) else np.zeros(0)
    record = {
        "unit": unit.index,
        "path": name,
        "rows": layout.num_rows,
        "tokens": int(lengths.sum()),
        "pieces": int(len(layout.length)),
        "documents": int(len(lengths)),
        "documents_split": int((pieces_per_doc > 1).sum()),
        "padding": int(layout.padding),
        "bytes": len(data),
        S.CHECKSUM: S.checksum(data),
        "skipped": dict(sorted(skipped.items())),
        "skipped_examples": {k: examples[k] for k in sorted(examples)},
        "sources": [{"path": sl.file.path, "start": sl.start, "end": sl.end} for sl in unit.slices],
    }
    storage.put_json(job.out, f"{S.UNIT_DIR}/{unit.index:06d}.json", record)
    faults.point("kill-worker")
    return record


def _gather(tokens: list[np.ndarray], doc_chunk: np.ndarray, doc_start: np.ndarray, layout, job: Job) -> np.ndarray:
    """Copy every piece's tokens to its slots; returns (rows * seq_len,) of the shard dtype.

    ``tokens`` holds each chunk's tokens; document d starts at
    ``doc_start[d]`` in ``tokens[doc_chunk[d]]``. One slice copy per piece:
    pieces are runs of hundreds of tokens on real text, so this moves memory
    at memcpy speed, where per-token fancy indexing built three int64 index
    arrays the size of the unit.
    """
    seq_len = job.seq_len
    out = np.full(layout.num_rows * seq_len, job.tokenizer.pad_id, dtype=job.dtype)
    if not len(layout.doc):
        return out
    chunk = doc_chunk[layout.doc].tolist()
    src = (doc_start[layout.doc] + layout.offset).tolist()
    dst = (layout.row * seq_len + layout.slot).tolist()
    for c, s, d, n in zip(chunk, src, dst, layout.length.tolist()):
        out[d : d + n] = tokens[c][s : s + n]
    return out


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
                window: "_Window", stop: threading.Event, on_bytes) -> None:
    """Reader thread: cut the units into chunks, in order, onto ``events``.

    Posts ("chunk", unit, seq, parts) per chunk, taking one of ``slots`` first
    (so reading runs ahead of tokenizing by a bounded amount), ("end", unit,
    n_chunks) after each unit, then ("done",); or ("error", exc). A unit is
    started only when ``window`` lets it in (its tokens are held until its
    shard is written, so this bounds memory whatever the corpus size).
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
        events.put(("chunk", u, seq, parts))

    try:
        parts, size, seq = [], 0, 0
        current = None
        for u, part in iter_parts_many(slices(), text_field, on_bytes):
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
                events.put(("end", u, seq))
                parts, size, seq = [], 0, 0
                continue
            parts.append(part)
            size += part.nbytes
            if size >= PART_BYTES:
                post(u, seq, parts)
                parts, size, seq = [], 0, seq + 1
        events.put(("done",))
    except _Stopped:
        return
    except BaseException as e:  # forwarded to the main thread
        events.put(("error", e))


class _Stopped(Exception):
    pass


class _Window:
    """Units read but not yet written: at most two, or more while their input
    bytes stay under ``limit`` (small units, many cores)."""

    def __init__(self, limit: int):
        self.limit, self.count, self.used = limit, 0, 0
        self.cond = threading.Condition()

    def enter(self, weight: int, timeout: float = 0.1) -> bool:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.count < 2 or self.used + weight <= self.limit, timeout)
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
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(encoder, job))
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


# --------------------------------------------------------------------------
# Orchestration.


def _prepare_out(cfg: BuildConfig, settings: dict) -> bool:
    """Make ``out`` ready; return True if it already holds a finished, matching build."""
    out = cfg.out
    build_json = os.path.join(out, "build.json")
    if os.path.exists(out) and not os.path.isdir(out):
        raise PackerError(f"output {out} exists and is not a folder")
    entries = sorted(os.listdir(out)) if os.path.isdir(out) else []

    def old_settings() -> dict:
        with open(build_json) as f:
            return json.load(f).get("settings", {})

    action = storage.out_action(out, entries, cfg, settings, old_settings)
    if action == "done":
        return True
    if action == "replace":
        for e in entries:
            p = os.path.join(out, e)
            shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
    try:
        os.makedirs(os.path.join(out, S.SHARD_DIR), exist_ok=True)
        os.makedirs(os.path.join(out, S.UNIT_DIR), exist_ok=True)
        for d in (S.SHARD_DIR, S.UNIT_DIR):  # temp files of a killed build
            for name in os.listdir(os.path.join(out, d)):
                if name.startswith(".tmp-"):
                    os.unlink(os.path.join(out, d, name))
        if not os.path.exists(build_json):
            S.write_json(build_json, {"format": S.FORMAT_NAME, "format_version": S.FORMAT_VERSION, "settings": settings})
    except OSError as e:
        raise PackerError(f"cannot write to output folder {out}: {e.strerror}") from None
    return False


def _finished(out: str, unit: Unit) -> dict | None:
    """The unit's record if its shard is complete on disk, else None."""
    path = os.path.join(out, S.UNIT_DIR, f"{unit.index:06d}.json")
    try:
        with open(path) as f:
            rec = json.load(f)
        if os.path.getsize(os.path.join(out, rec["path"])) == rec["bytes"]:
            return rec
    except (OSError, ValueError, KeyError):
        pass
    return None


def build(cfg: BuildConfig, progress=None, on_sized=None) -> BuildResult:
    """Run a build. ``progress`` (optional) is called as
    progress(done_bytes, docs, tokens, units_done, units, total_bytes);
    ``on_sized`` (optional) as on_sized(files_done, files) while the input
    files found are sized, before any is read."""
    t0 = time.perf_counter()
    if cfg.seq_len < 2:
        raise PackerError(f"--seq-len must be at least 2 (got {cfg.seq_len})")
    if cfg.unit_bytes < 4096:
        raise PackerError(f"--unit-mb must be at least 0.004 (4 KB); got {cfg.unit_bytes} bytes")
    if cfg.pack not in MODES:
        raise PackerError(f"unknown --pack {cfg.pack!r}: choose from {', '.join(MODES)}")
    if not cfg.inputs:
        raise PackerError("no inputs given")
    if cfg.engine not in ("local", "ray"):
        raise PackerError(f"unknown --engine {cfg.engine!r}: choose local or ray")
    tok = resolve_tokenizer(cfg.tokenizer, cfg.eos, cfg.eos_token)
    found = discover(list(cfg.inputs), exclude=cfg.out, on_sized=on_sized)
    if not found.files:
        raise PackerError(f"no input files found in {', '.join(cfg.inputs)}")
    units = plan_units(plan_slices(found.files, cfg.unit_bytes), cfg.unit_bytes)
    tok = choose_backend(tok, cfg.tokenizer_backend, lambda: sample_texts([s for u in units for s in u.slices], cfg.text_field))
    settings = _settings(cfg, tok, units)
    job = Job(cfg.out, cfg.seq_len, cfg.pack, cfg.text_field, cfg.strict, tok, S.dtype_for_vocab(tok.vocab_size))

    remote_out = storage.is_uri(cfg.out)
    already = storage.prepare_out(cfg, settings) if remote_out else _prepare_out(cfg, settings)
    notes = list(tok.notes)
    if found.ignored:
        notes.append(f"ignored {len(found.ignored)} file(s) of unsupported type, e.g. {found.ignored[0]}")
    if found.duplicates:
        notes.append(f"{len(found.duplicates)} input path(s) named twice were read once, e.g. {found.duplicates[0]}")
    if already:
        manifest = storage.read_manifest(cfg.out)
        return BuildResult(manifest, time.perf_counter() - t0, 0, len(units), notes + ["build was already complete: nothing to do"])

    records: dict[int, dict] = {}
    todo = []
    done = storage.finished_records(cfg.out, units) if cfg.resume and remote_out else None
    for u in units:
        rec = (done.get(u.index) if done is not None else _finished(cfg.out, u)) if cfg.resume else None
        if rec is not None:
            records[u.index] = rec
        else:
            todo.append(u)
    if todo and cfg.engine == "ray":
        from .engine_ray import run_ray

        notes += run_ray(cfg, todo, job, records, units, progress)
    elif todo:
        _bounded_malloc()
        workers = max(1, min(cfg.workers or os.cpu_count() or 1, _chunks_at_most(todo)))
        with _one_core_tokenizer():
            encoder = _get_encoder(tok)  # parsed once here; forked workers inherit it
            _run(todo, job, workers, encoder, records, units, progress)

    manifest = _manifest(cfg, tok, job, settings, units, records, found)
    faults.point("manifest")
    storage.put_json(cfg.out, S.MANIFEST, manifest)
    return BuildResult(manifest, time.perf_counter() - t0, len(todo), len(units) - len(todo), notes)


def _chunks_at_most(todo: list[Unit]) -> int:
    """An upper bound on the chunks the units make: more workers than that would idle."""
    return sum(max(1, -(-u.weight // PART_BYTES)) + len(u.slices) for u in todo)


def _run(todo, job, workers, encoder, records, units, progress) -> None:
    """Read, tokenize and assemble the ``todo`` units on ``workers`` cores; fill ``records``."""
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

    pool = _make_pool(workers, encoder, job) if workers > 1 else None
    task_job = None if pool is not None else job  # pool workers got the job once, at start
    ex = pool or _Inline()
    events: queue.Queue = queue.Queue()
    # Chunks read but not yet tokenized: enough that no core waits on the
    # reader, few enough that memory does not grow with the corpus.
    slots = threading.Semaphore(2 * workers + 2)
    window = _Window(max(4 * workers * PART_BYTES, 2 * max(u.weight for u in todo)))
    stop = threading.Event()
    reader = threading.Thread(target=_read_units, args=(todo, job.text_field, events, slots, window, stop, on_bytes),
                              name="packer-reader", daemon=True)
    by_index = {u.index: u for u in todo}
    chunks: dict[int, dict[int, ChunkResult]] = {u.index: {} for u in todo}
    n_chunks: dict[int, int] = {}
    failure: BaseException | None = None

    def deliver(kind, u, seq):
        def cb(fut):
            events.put(("result", kind, u, seq, fut))
        return cb

    in_flight = 0  # tasks submitted whose result event has not been handled

    def submit(kind, u, seq, fn, *args) -> None:
        nonlocal in_flight
        in_flight += 1
        ex.submit(fn, *args).add_done_callback(deliver(kind, u, seq))

    def maybe_assemble(u: int) -> None:
        got = chunks[u]
        if n_chunks.get(u) == len(got):
            parts = [got[i] for i in range(len(got))]
            del chunks[u]
            submit("unit", u, None, assemble_unit, task_job, by_index[u], parts)

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
            if ev[0] == "chunk":
                _, unit, seq, parts = ev
                u = unit.index
                submit("chunk", u, seq, encode_chunk, task_job, u, parts)
            elif ev[0] == "end":
                u = ev[1].index
                n_chunks[u] = ev[2]
                maybe_assemble(u)
            elif ev[0] == "result":
                _, kind, u, seq, fut = ev
                in_flight -= 1
                res = fut.result()
                if kind == "chunk":
                    slots.release()
                    chunks[u][seq] = res
                    docs += len(res.lengths)
                    tokens += len(res.tokens)
                    maybe_assemble(u)
                else:
                    records[u] = res
                    finished += by_index[u].weight
                    window.leave(by_index[u].weight)
                report()
            elif ev[0] == "error":
                raise ev[1]
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
        reader.join(timeout=5)


def _manifest(cfg, tok, job, settings, units, records, found) -> dict:
    recs = [records[u.index] for u in units]
    skipped: Counter = Counter()
    examples: dict[str, list[str]] = {}
    for r in recs:
        skipped.update(r["skipped"])
        for k, v in r["skipped_examples"].items():
            ex = examples.setdefault(k, [])
            ex.extend(v[: MAX_EXAMPLES - len(ex)])
    rows = sum(r["rows"] for r in recs)
    padding = sum(r["padding"] for r in recs)
    totals = {
        "documents": sum(r["documents"] for r in recs),
        "tokens": sum(r["tokens"] for r in recs),
        "rows": rows,
        "slots": rows * cfg.seq_len,
        "padding": padding,
        "padding_pct": round(100.0 * padding / max(1, rows * cfg.seq_len), 4),
        "pieces": sum(r["pieces"] for r in recs),
        "documents_split": sum(r["documents_split"] for r in recs),
        "skipped": dict(sorted(skipped.items())),
        "skipped_examples": {k: examples[k] for k in sorted(examples)},
        "input_files": len(found.files),
        "input_bytes": sum(f.size for f in found.files),
        "ignored_files": len(found.ignored),
    }
    shard_keys = ("unit", "path", "rows", "tokens", "pieces", "documents", "documents_split", "padding", "bytes", S.CHECKSUM, "sources")
    return {
        "format": S.FORMAT_NAME,
        "format_version": S.FORMAT_VERSION,
        "seq_len": cfg.seq_len,
        "dtype": job.dtype,
        "pad_id": tok.pad_id,
        "eos_id": tok.eos_id,
        "vocab_size": tok.vocab_size,
        "checksum": S.CHECKSUM,
        "tokenizer": tok.manifest(),
        "settings": settings,
        "totals": totals,
        "shards": [{k: r[k] for k in shard_keys} for r in recs],
    }
