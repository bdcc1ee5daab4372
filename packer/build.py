"""Build: raw text in, verified shards and a manifest out.

The unit of work is ``run_unit``: a deterministic function from a ``Unit`` (a
few slices of input, about ``unit_bytes`` of it) to one finished shard plus a
unit record. Everything else follows from that:

- parallelism: units run in worker processes, any number at once;
- byte-identical output whatever ``--workers`` is: a unit's shard depends on
  its input and the settings alone;
- crash-resume: a unit whose record and shard exist is finished; ``--resume``
  runs only the others;
- the manifest is assembled from unit records last, so a build folder with a
  manifest is complete.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import numpy as np

from . import shards as S
from .errors import PackerError
from .pack import MODES, pack
from .sources import Skip, Slice, discover, plan_slices, read_slice, strict_error
from .tokenizer import Encoder, TokenizerInfo, resolve_tokenizer

DEFAULT_UNIT_BYTES = 64 << 20
MAX_EXAMPLES = 5  # file:line examples kept per skip reason
BATCH_CHARS = 1 << 20  # text handed to the tokenizer at once


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
# The unit of work.

_encoder: Encoder | None = None
_counters = None  # shared progress counters: [bytes, docs, tokens]


def _init_worker(counters) -> None:
    global _counters
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one core per worker
    _counters = counters


def _get_encoder(info: TokenizerInfo) -> Encoder:
    global _encoder
    if _encoder is None or _encoder.info != info:
        _encoder = Encoder(info)
    return _encoder


def _bump(i: int, n: int) -> None:
    if _counters is not None:
        with _counters.get_lock():
            _counters[i] += n


def run_unit(unit: Unit, job: Job) -> dict:
    """Read, tokenize, pack and write one unit; return its record (also on disk)."""
    enc = _get_encoder(job.tokenizer)
    docs: list[np.ndarray] = []
    skipped: Counter = Counter()
    examples: dict[str, list[str]] = {}
    read_bytes = 0

    def on_bytes(n: int) -> None:
        nonlocal read_bytes
        read_bytes += n
        _bump(0, n)

    batch: list[str] = []
    chars = 0

    def flush() -> None:
        nonlocal batch, chars
        arrays = enc.encode_batch(batch)
        _bump(1, len(arrays))
        _bump(2, sum(len(a) for a in arrays))
        docs.extend(arrays)
        batch, chars = [], 0

    def skip(rec: Skip) -> None:
        if job.strict:
            raise strict_error(rec)
        skipped[rec.reason] += 1
        ex = examples.setdefault(rec.reason, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(rec.where)

    for sl in unit.slices:
        for rec in read_slice(sl, job.text_field, on_bytes):
            if isinstance(rec, Skip):
                skip(rec)
                continue
            batch.append(rec)
            chars += len(rec)
            if chars >= BATCH_CHARS:
                flush()
    if batch:
        flush()
    _bump(0, unit.weight - read_bytes)  # settle progress to the unit's planned size

    # Documents that encode to nothing (possible only with --no-eos) cannot be placed.
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    if len(lengths) and lengths.min() == 0:
        for i in np.nonzero(lengths == 0)[0]:
            skip(Skip("no_tokens", f"unit {unit.index} document {i}"))
        keep = lengths > 0
        docs = [d for d, k in zip(docs, keep) if k]
        lengths = lengths[keep]

    layout = pack(lengths, job.seq_len, job.pack)
    tokens = _gather(docs, lengths, layout, job)
    table = S.shard_table(tokens, job.seq_len, layout.row, layout.length, layout.doc, layout.offset, layout.num_rows)
    data = S.table_bytes(table)
    name = f"{S.SHARD_DIR}/{unit.index:06d}.arrow"
    S.atomic_write(os.path.join(job.out, name), data)

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
    S.write_json(os.path.join(job.out, S.UNIT_DIR, f"{unit.index:06d}.json"), record)
    return record


def _gather(docs: list[np.ndarray], lengths: np.ndarray, layout, job: Job) -> np.ndarray:
    """Copy every piece's tokens to its slots; returns (rows * seq_len,) of the shard dtype."""
    seq_len = job.seq_len
    out = np.full(layout.num_rows * seq_len, job.tokenizer.pad_id, dtype=job.dtype)
    if not len(docs):
        return out
    flat = np.concatenate(docs)
    doc_start = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=doc_start[1:])
    src = doc_start[layout.doc] + layout.offset
    dst = layout.row * seq_len + layout.slot
    run_start = np.cumsum(layout.length) - layout.length  # where each piece starts in the piece stream
    total = int(layout.length.sum())
    step = np.arange(total, dtype=np.int64) - np.repeat(run_start, layout.length)
    out[np.repeat(dst, layout.length) + step] = flat[np.repeat(src, layout.length) + step]
    return out


# --------------------------------------------------------------------------
# Orchestration.


def _prepare_out(cfg: BuildConfig, settings: dict) -> bool:
    """Make ``out`` ready; return True if it already holds a finished, matching build."""
    out = cfg.out
    build_json = os.path.join(out, "build.json")
    if os.path.exists(out) and not os.path.isdir(out):
        raise PackerError(f"output {out} exists and is not a folder")
    entries = sorted(os.listdir(out)) if os.path.isdir(out) else []
    ours = {S.MANIFEST, "build.json", S.SHARD_DIR, S.UNIT_DIR}
    if entries and cfg.resume:
        if not os.path.exists(build_json):
            raise PackerError(f"cannot resume: {out} holds no packer build (no build.json)")
        with open(build_json) as f:
            old = json.load(f).get("settings", {})
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            k = diff[0]
            what = "input files changed" if k == "input_plan" else f"{k} was {old.get(k)!r}, now {settings[k]!r}"
            raise PackerError(f"cannot resume {out}: it was built with other settings ({what}); use --overwrite or another folder")
        if os.path.exists(os.path.join(out, S.MANIFEST)):
            return True
    elif entries and cfg.overwrite:
        foreign = [e for e in entries if e not in ours]
        if foreign:
            raise PackerError(
                f"refusing to overwrite {out}: it holds files packer did not write ({', '.join(foreign[:3])}); choose another folder"
            )
        for e in entries:
            p = os.path.join(out, e)
            shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
    elif entries:
        raise PackerError(f"output folder {out} is not empty: pass --resume to continue a build there, or --overwrite to replace it")
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


def build(cfg: BuildConfig, progress=None) -> BuildResult:
    """Run a build. ``progress`` (optional) is called as progress(done_bytes, docs, tokens, units_done)."""
    t0 = time.perf_counter()
    if cfg.seq_len < 2:
        raise PackerError(f"--seq-len must be at least 2 (got {cfg.seq_len})")
    if cfg.unit_bytes < 4096:
        raise PackerError(f"--unit-mb must be at least 0.004 (4 KB); got {cfg.unit_bytes} bytes")
    if cfg.pack not in MODES:
        raise PackerError(f"unknown --pack {cfg.pack!r}: choose from {', '.join(MODES)}")
    if not cfg.inputs:
        raise PackerError("no inputs given")
    tok = resolve_tokenizer(cfg.tokenizer, cfg.eos, cfg.eos_token)
    found = discover(list(cfg.inputs), exclude=cfg.out)
    if not found.files:
        raise PackerError(f"no input files found in {', '.join(cfg.inputs)}")
    units = plan_units(plan_slices(found.files, cfg.unit_bytes), cfg.unit_bytes)
    settings = _settings(cfg, tok, units)
    job = Job(cfg.out, cfg.seq_len, cfg.pack, cfg.text_field, cfg.strict, tok, S.dtype_for_vocab(tok.vocab_size))

    already = _prepare_out(cfg, settings)
    notes = list(tok.notes)
    if found.ignored:
        notes.append(f"ignored {len(found.ignored)} file(s) of unsupported type, e.g. {found.ignored[0]}")
    if found.duplicates:
        notes.append(f"{len(found.duplicates)} input path(s) named twice were read once, e.g. {found.duplicates[0]}")
    if already:
        manifest = S.read_manifest(cfg.out)
        return BuildResult(manifest, time.perf_counter() - t0, 0, len(units), notes + ["build was already complete: nothing to do"])

    records: dict[int, dict] = {}
    todo = []
    for u in units:
        rec = _finished(cfg.out, u) if cfg.resume else None
        if rec is not None:
            records[u.index] = rec
        else:
            todo.append(u)
    total_bytes = sum(u.weight for u in units)
    done_before = sum(u.weight for u in units if u.index in records)
    workers = cfg.workers or os.cpu_count() or 1
    workers = max(1, min(workers, len(todo) or 1))

    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    counters = ctx.Array("q", 3)
    counters[0] = done_before

    def report():
        if progress is not None:
            progress(counters[0], counters[1], counters[2], len(records), len(units), total_bytes)

    if workers == 1 or len(todo) <= 1:
        global _counters
        _counters = counters
        try:
            for u in todo:
                records[u.index] = run_unit(u, job)
                report()
        finally:
            _counters = None
    else:
        _run_pool(todo, job, workers, ctx, counters, records, report)

    manifest = _manifest(cfg, tok, job, settings, units, records, found)
    S.write_json(os.path.join(cfg.out, S.MANIFEST), manifest)
    return BuildResult(manifest, time.perf_counter() - t0, len(todo), len(units) - len(todo), notes)


def _run_pool(todo, job, workers, ctx, counters, records, report) -> None:
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(counters,))
    pending: dict = {}
    queue = list(reversed(todo))
    try:
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                u = queue.pop()
                pending[pool.submit(run_unit, u, job)] = u
            done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            for fut in done:
                u = pending.pop(fut)
                try:
                    records[u.index] = fut.result()
                except BrokenProcessPool:
                    raise PackerError(
                        f"a worker process died (killed, or out of memory) while building unit {u.index}; "
                        "nothing half-written was kept: rerun with --resume"
                    ) from None
            report()
    except BaseException:
        for p in list(getattr(pool, "_processes", {}).values()):
            p.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


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
