"""Stats: verify a build against its manifest and measure what it holds.

``check(out)`` reads every shard once, front to back, and in that one pass

- hashes the file (xxh3_128) as the bytes arrive,
- parses them as an Arrow IPC stream (the body of an IPC file is one) and
  checks every record batch: token ids ``< vocab_size``, each row's
  ``doc_lens`` summing to at most ``seq_len`` with the rest ``pad_id``,
  pieces that tile their documents,
- counts rows, tokens, pieces, documents and padding for the comparison with
  the manifest and for the statistics.

Memory is one record batch (1024 rows) plus one shard's piece table (three
int64 per piece: a few MB for a 64 MB unit) plus exact distributions whose
size depends on the number of *distinct* values, never on the build's size.

With ``deep=False`` (``packer stats --no-verify``) the token column is not
read at all: shards are memory-mapped and only the small piece columns are
touched, so the statistics cost a few percent of a full read.

Problems are collected, never raised: one ``Problem`` per finding, naming the
file. ``ShardError`` is raised only when the manifest itself cannot be read.
"""

from __future__ import annotations

import os
from itertools import islice

import numpy as np

from .. import faults, procs
from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import storage_for
from ..io import cpu_limit
from ..shards import ManifestStream
from . import listing, loss_mask
from .report import Problem, ShardFigures, Report
from .scan import ShardScan, added, scan_deep, scan_shallow

# --------------------------------------------------------------------------
# The whole build.

_COUNTS = ("rows", "tokens", "pieces", "documents", "documents_split", "padding")


def _need(m: dict, out: str, *keys):
    path = os.path.join(out, S.MANIFEST)
    cur = m
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            raise ShardError(f"{path}: manifest lacks {'.'.join(map(str, keys))!r}")
        cur = cur[k]
    return cur


def check(out: str, deep: bool = True, progress=None, workers: int = 1) -> Report:
    """Verify the build in ``out`` (a folder, or a URI prefix such as
    ``s3://bucket/out``) and measure it.

    ``deep``: read every byte (checksums, token ids, padding); otherwise read
    only the piece columns. ``progress(nbytes)`` is called as shard bytes are
    read (and ``progress.start(total_bytes, shards)`` first, where it has one). ``workers``: shards
    checked at once, in processes for a local build (``_in_processes``), in threads on an object store
    (the report is the same, in manifest order); 0: one per CPU this process may use (io/cpus.py). Raises ``ShardError`` only
    for an unreadable manifest. A remote shard is fetched whole into memory to be verified (one GET per shard).
    Memory does not grow with the number of shards: the manifest is read in slices, twice (its entries
    summed and named, then checked against the shards; packer/shards/manifest_stream.py), the folder
    walked an entry at a time (packer/inspect/listing.py), each shard's figures spooled (``ShardLog``).
    Longer than 60 lines: the checks of a build in the order a reader needs them, each a few lines.
    """
    workers = workers or cpu_limit().count  # affinity and a cgroup quota, not the host's cores
    store = storage_for(out)
    known, sums, lacking, total = listing.Names(), dict.fromkeys(_COUNTS, 0), [], [0]

    def first(i: int, e: dict) -> None:
        for k in ("path", "bytes", S.CHECKSUM) + _COUNTS:
            if k not in e:
                lacking.append(f"{os.path.join(out, S.MANIFEST)}: shard entry {i} lacks {k!r}")
        if not lacking:
            for k in _COUNTS:
                sums[k] += int(e[k])
            total[0] += int(e["bytes"])
            known.add_entry(e)

    ms = ManifestStream(store, first)
    if lacking:
        raise ShardError(lacking[0])
    m = ms.head
    objects = store.list() if store.sizes_by_listing else None  # an object store: {rel: size}, one listing
    seq_len, dtype = int(_need(m, out, "seq_len")), str(_need(m, out, "dtype"))
    vocab = int(m.get("vocab_size", _need(m, out, "tokenizer", "vocab_size")))
    pad_id = int(m.get("pad_id", _need(m, out, "tokenizer", "pad_id")))
    rep = Report(out, m, deep)
    rep.row_tokens = np.zeros(1, dtype=np.int64)  # grows to the fullest row (a hostile seq_len costs nothing)
    if dtype not in ("uint16", "uint32") or np.iinfo(np.dtype(dtype)).max < vocab - 1:
        rep.problems.append(Problem("", "manifest", f"manifest: dtype {dtype} cannot hold token ids below vocab_size {vocab}"))
    _check_totals(rep, m, sums)
    damaged = S.damaged_index(store)  # the index PackedDataset and show read (they warn and use the manifest)
    if damaged:
        rep.problems.append(Problem(S.INDEX, "index", f"damaged shard index ({damaged}): readers ignore it and read "
                                                      f"{S.MANIFEST}; `packer index {out}` rewrites it"))
    if hasattr(progress, "start"):
        progress.start(total[0], ms.n)

    def one(e: dict) -> Report:
        return _check_shard(Report(out, m, deep), store, objects, e, (seq_len, dtype, vocab, pad_id), progress)

    entries = ms.entries()
    if workers > 1 and ms.n > 1 and store.fork_safe and procs.can_fork():
        for part in _in_processes(entries, workers, (out, m, deep, (seq_len, dtype, vocab, pad_id)), progress):
            _merge(rep, part)
    elif workers > 1 and ms.n > 1:  # a store (the time is in requests, which release the GIL), or no fork
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers, thread_name_prefix="packer-stats") as pool:
            while window := list(islice(entries, 4 * workers)):  # a window at a time: memory stays a few shards'
                for part in pool.map(one, window):
                    _merge(rep, part)
    else:
        for e in entries:
            _merge(rep, one(e))
    held, sub = m.get("holdout"), None
    if isinstance(held, dict) and isinstance(held.get("path"), str):
        # The holdout split is a build of its own inside this one: check it as one, name its problems by its folder.
        sub = held["path"].strip("/")
        try:
            hrep = check(out.rstrip("/") + "/" + sub, deep, progress, workers)
            rep.problems.extend(Problem(f"{sub}/{p.path}" if p.path else sub, p.kind, p.message) for p in hrep.problems)
            rep.bytes_read += hrep.bytes_read
            rep.holdout_shards += hrep.checked_shards
        except ShardError as e:
            rep.problems.append(Problem(sub, "missing", f"holdout build: {e}"))
    rep.problems.extend(listing.extra_files(store, objects, known, skip=sub))
    return rep


def _check_shard(part: Report, store, objects: dict, e: dict, shape: tuple, progress) -> Report:
    """One shard's checks and figures, into ``part`` (a report of its own: merged by the caller)."""
    seq_len, dtype, vocab, pad_id = shape
    part.row_tokens = np.zeros(1, dtype=np.int64)
    rel = e["path"]
    fig = ShardFigures(rel, e.get("unit"))
    part.shards.pending.append(fig)  # (summed when merged into the report: filled in below)
    if not store.inside(rel):
        part.problems.append(Problem(str(rel), "manifest", "shard path points outside the build folder"))
        return part
    size = listing.size(store, objects, rel)
    if size is None:
        part.problems.append(Problem(rel, "missing", "missing: the manifest names it but there is no such file"))
        return part
    fig.bytes = size
    if size != e["bytes"]:
        what = "truncated" if size < e["bytes"] else "longer than written"
        part.problems.append(Problem(rel, "size", f"{size:,} bytes, the manifest says {e['bytes']:,} ({what})"))
        if progress is not None:
            progress(e["bytes"])
        return part
    scan = ShardScan(part, rel, seq_len, dtype, vocab, pad_id, part.deep)
    if part.deep:
        part.problems.extend(scan_deep(scan, store, rel, e, fig, progress))
        part.bytes_read += size
    else:
        part.problems.extend(scan_shallow(scan, store, rel, size, fig, progress))
    if fig.rows is not None and fig.documents is not None:
        if part.deep:
            part.problems.extend(Problem(rel, kind, msg) for kind, msg in loss_mask.shard_problems(fig, e))
        for k in _COUNTS:
            got, want = getattr(fig, k), e[k]
            if got != want:
                part.problems.append(Problem(rel, "count", f"{k}: {got:,} in the shard, the manifest says {want:,}"))
    return part


def _in_processes(entries, workers: int, job: tuple, progress):
    """Reports of up to 16 shards each (``_check_shard``, merged), in manifest order, from ``workers``
    processes, a window of tasks at a time. Threads do not scale here: most of a shard's check
    holds the GIL (16 threads took 2.2x the time of one: docs/benchmarks.md). Forked (``procs.can_fork``):
    a spawned worker would import the caller's main module again, which a notebook or stdin lacks.
    Under signals the checkers are the build's workers (packer/procs.py): they die with this process,
    Ctrl-C ends their task at the next shard (a second one kills them), and a checker that dies or is
    stopped ends the check in one line."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=procs.start_worker,
                               initargs=(True,))
    watch = procs.Watch("checker process", "packer stats", "run it again")
    kill, nudge = False, False
    try:
        procs.started(pool, watch)  # (the checkers are forked at the first task, while no signal may land)
        while window := list(islice(entries, 16 * 4 * workers)):
            step = max(1, min(16, -(-len(window) // workers)))  # few shards: spread over every checker
            tasks = [window[a:a + step] for a in range(0, len(window), step)]
            futures = [pool.submit(_check_entries, (job, t)) for t in tasks]
            for task, fut in zip(tasks, futures):
                while not wait([fut], timeout=procs.QUIET_S).done:
                    watch.look(pool)
                if progress is not None:
                    progress(sum(int(e["bytes"]) for e in task))
                yield fut.result()
    except BrokenProcessPool:
        kill = True
        raise PackerError("a checker process died (killed, or out of memory) before its shards were checked; "
                          "nothing was changed: run packer stats again") from None
    except procs.WorkerStopped:
        kill = True
        raise
    except (KeyboardInterrupt, GeneratorExit):  # (GeneratorExit: the caller stopped reading, on its own Ctrl-C)
        nudge = True
        raise
    finally:
        procs.close(pool, kill_first=kill, nudge=nudge)


def _check_entries(args: tuple) -> Report:
    """The report of a few shards, merged in order (a task of ``_in_processes``, in a worker process:
    the merging is spread over the workers, not left to this one)."""
    (out, m, deep, shape), entries = args
    store, task = storage_for(out), Report(out, m, deep)
    task.row_tokens = np.zeros(1, dtype=np.int64)
    for e in entries:
        if procs.interrupted():  # Ctrl-C: the caller is stopping and drops this report
            break
        faults.point("slow")  # (the signal tests' fault: 2 s a shard)
        _merge(task, _check_shard(Report(out, m, deep), store, None, e, shape, None))
    return task


def _merge(rep: Report, part: Report) -> None:
    for s in part.shards.pending:
        rep.shards.add(s)
    rep.problems.extend(part.problems)
    rep.bytes_read += part.bytes_read
    rep.row_tokens = added(rep.row_tokens, part.row_tokens)
    rep.pieces_per_row = added(rep.pieces_per_row, part.pieces_per_row)
    rep.doc_lengths.merge(part.doc_lengths)


def verify(out: str) -> Report:
    """``check`` with every byte read (what ``packer stats`` does by default)."""
    return check(out, deep=True)


def _check_totals(rep: Report, m: dict, sums: dict) -> None:
    """The manifest's totals against the sums of its shard entries (``sums``: by count)."""
    t = m["totals"]
    sums = {**sums, "slots": sums["rows"] * m["seq_len"]}
    for k, v in sums.items():
        if k in t and t[k] != v:
            rep.problems.append(Problem("manifest.json", "totals", f"totals.{k} is {t[k]:,}, its shard entries sum to {v:,}"))


# ``packer stats`` in one import: the check above, and what is made of its report.
from .figures import figures, json_chunks, plot, require_matplotlib, summary_lines, table_lines, to_json  # noqa: E402,F401
from .progress import progress_for  # noqa: E402,F401
from .report import KINDS, STATS_VERSION, Dist  # noqa: E402,F401
