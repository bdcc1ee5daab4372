"""Where a many-core build's wall time goes: every task of one build, on a timeline.

Runs ``packer.build`` in this process with ``--workers N`` and records the build's serial steps
(``BuildResult.phases``), every task a worker ran (a chunk: parse and tokenize ~256 KB; a unit: pack
and write one shard; the backend check) with its process, start and end on the shared monotonic
clock, when the reader thread posted each chunk, and the main process's CPU seconds. From those it
prints what bounds the speed-up: the time before the first task, how busy the workers are until the
last chunk, their gaps between tasks, and the tail after the last chunk. Run it for 1 and N workers:

    python bench/build_trace.py bench_out/real/real.jsonl --tokenizer ../shared/data/llama3 --workers 1 16

What the host gives, in the same call: ``--ceiling`` (N processes encoding the texts from memory,
nothing else), ``--clock`` (a pure integer loop on 1 and on N cores at once: a host that slows its
cores when all of them work caps every program's N-fold speed-up), and ``--loaded`` with
``--cli-only`` (the 1-worker build while the other cores spin: a linear baseline at the all-core clock).
Each row also gives CPU seconds per GB of text (decompressed): the main process's, and the workers' split
into read, parse, encode, spill, pack, gather, Arrow, checksum and write. ``--reader both`` runs each
build twice, side by side: jsonl read by the main process's reader thread (as before Spans) and by
the workers (reader.Span), and prints their main-process and whole-build CPU per GB.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import multiprocessing as mp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.environ.get("PACKER_TRACE_TREE") or os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common import corpus_texts, pin, spin, start_together  # noqa: E402

local = importlib.import_module("packer.pipeline.engines.local")
base = importlib.import_module("packer.pipeline.engines.base")
backend_check = importlib.import_module("packer.pipeline.backend_check")
reader = importlib.import_module("packer.pipeline.engines.reader")
unit = importlib.import_module("packer.pipeline.unit")
packed = importlib.import_module("packer.pipeline.packed")
shards = importlib.import_module("packer.shards")
spill = importlib.import_module("packer.pipeline.spill")

S: dict = {"dir": None, "depth": 0, "posted": [], "cpu": {}, "main": os.getpid()}  # forked workers inherit it
SPANS_OF = reader.spans_of


def _span(kind: str, fn):
    """``fn`` recording [kind, start, end] in this process's file; nested traced calls count once.
    functools.wraps keeps fn's module and name, so a pool pickles the patched function by reference."""
    @functools.wraps(fn)
    def traced(*args):
        t0 = time.monotonic()
        S["depth"] += 1
        try:
            return fn(*args)
        finally:
            S["depth"] -= 1
            if not S["depth"]:
                with open(os.path.join(S["dir"], f"{os.getpid()}.jsonl"), "a") as f:
                    f.write(json.dumps([kind, t0, time.monotonic()]) + "\n")
                if os.getpid() != S["main"]:  # a worker: its CPU split so far
                    with open(os.path.join(S["dir"], f"{os.getpid()}.cpu"), "w") as f:
                        json.dump({k: v for k, v in S["cpu"].items() if isinstance(k, str)}, f)
    return traced


def _cpu(name: str, fn, clock=time.thread_time):
    """``fn`` adding its CPU to ``name``; a call inside another of the same name counts once (``_assemble_task``
    calls ``assemble_unit``: counted twice, the unit's write step read 3 CPU-s a GB instead of 0.8)."""
    @functools.wraps(fn)
    def timed(*args, **kw):
        key = ("open", name)
        if S["cpu"].get(key):
            return fn(*args, **kw)
        S["cpu"][key], t0 = 1, clock()
        try:
            return fn(*args, **kw)
        finally:
            S["cpu"][key] = 0
            S["cpu"][name] = S["cpu"].get(name, 0.0) + clock() - t0
    return timed


def _reader(fn):
    """The reader thread, timed, its queue noting when each chunk is posted."""
    def read(todo, job, events, *rest):
        put = events.put

        def posted(ev, *a):
            if isinstance(ev, base.Chunk):
                S["posted"].append(time.monotonic())
            put(ev, *a)
        events.put = posted
        return fn(todo, job, events, *rest)
    return _cpu("reader", read)


# Worker CPU (process time: a worker runs one task at a time, its read-ahead threads included):
# read = task - parse+encode - spill (a Span's reading and decompressing); parse = parse+encode - encode.
SPLIT = ((local, "_encode_task", "task"), (local, "_span_task", "task"), (local, "encode_chunk", "parse+encode"),
         (unit, "_encode", "encode"), (spill, "put", "spill"), (spill.SpilledParts, "load", "spill"),
         (local, "_assemble_task", "unit"), (local, "assemble_unit", "unit"), (packed, "pack", "pack"),
         (packed, "gather", "gather"), (shards, "shard_table", "arrow"), (shards, "table_bytes", "arrow"),
         (shards, "checksum", "checksum"))


def _install() -> None:
    for obj, name, label in SPLIT:
        setattr(obj, name, _cpu(label, getattr(obj, name), time.process_time))
    spill.put_parts = _cpu("main spill write", spill.put_parts)
    # Pool tasks (spill reads and writes count as the task's work) and the inline ones (--workers 1).
    for name, kind in (("_encode_task", "chunk"), ("_span_task", "chunk"), ("encode_chunk", "chunk"),
                       ("_assemble_task", "unit"), ("assemble_unit", "unit")):
        setattr(local, name, _span(kind, getattr(local, name)))
    backend_check.check_input = _span("check", backend_check.check_input)
    local.make_pool = _cpu("pool start s", local.make_pool, time.monotonic)
    local.read_units = _reader(local.read_units)
    run = local._Scheduler.run

    def timed_run(self):  # a generator: its CPU from the first event to the last (records included)
        t0 = time.thread_time()
        try:
            yield from run(self)
        finally:
            S["cpu"]["event loop"] = S["cpu"].get("event loop", 0.0) + time.thread_time() - t0
    local._Scheduler.run = timed_run


def _fresh_process_state() -> None:
    """Forget what this process parsed or checked in an earlier build, as a new `packer build` process
    would (records on disk, PACKER_CACHE, stay)."""
    importlib.import_module("packer.tokenize").forget_parsed()
    importlib.import_module("packer.pipeline.unit").encoder_for.cache_clear()


def _usage() -> tuple[float, float, float, float, int]:
    me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_utime + me.ru_stime, ch.ru_utime + ch.ru_stime, me.ru_stime, ch.ru_stime, me.ru_minflt + ch.ru_minflt)


def _split(cpu: dict, gb: float) -> dict:
    """Worker CPU seconds per GB of text, by step."""
    g = {k: cpu.get(k, 0.0) for k in ("task", "parse+encode", "encode", "spill", "unit", "pack", "gather", "arrow",
                                       "checksum")}
    steps = {"read": g["task"] - g["parse+encode"] - g["spill"] if g["task"] else 0.0,
             "parse": g["parse+encode"] - g["encode"], "encode": g["encode"], "spill": g["spill"], "pack": g["pack"],
             "gather": g["gather"], "arrow": g["arrow"], "checksum": g["checksum"],
             "write": g["unit"] - g["pack"] - g["gather"] - g["arrow"] - g["checksum"]}
    return {k: max(0.0, v) / gb for k, v in steps.items()}


def _text_bytes(f) -> int:
    """Bytes of ``f`` once decompressed."""
    from packer.io import open_stream

    if f.compression is None:
        return f.size
    n = 0
    with open_stream(f.path, f.compression) as s:
        while b := s.read(1 << 22):
            n += len(b)
    return n


def trace(inputs: list[str], tokenizer: str | None, workers: int, by_workers: bool = True) -> dict:
    """One build, traced; returns the figures (seconds). ``by_workers``: False has the reader thread read jsonl."""
    from packer import build
    from packer.formats import discover

    reader.spans_of = SPANS_OF if by_workers else (lambda sl: None)
    gb = sum(_text_bytes(f) for f in discover(inputs).files) / 1e9
    tmp = tempfile.mkdtemp(prefix="trace-")
    S.update(dir=os.path.join(tmp, "spans"), posted=[], cpu={})
    os.makedirs(S["dir"])
    _fresh_process_state()
    try:
        u0, t0 = _usage(), time.monotonic()
        r = build(inputs, os.path.join(tmp, "out"), tokenizer=tokenizer, workers=workers, quiet=True)
        wall, u1 = time.monotonic() - t0, _usage()
        spans, wcpu = [], dict(S["cpu"]) if workers == 1 else {}
        for name in os.listdir(S["dir"]):
            with open(os.path.join(S["dir"], name)) as f:
                if name.endswith(".cpu"):
                    for k, v in json.load(f).items():
                        wcpu[k] = wcpu.get(k, 0.0) + v
                    continue
                spans += [(int(name.split(".")[0]), *json.loads(line)) for line in f]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ph = list(r.phases.items())
    engine_t0 = t0 + sum(v for k, v in ph[: [k for k, _ in ph].index("units (workers)")])
    of = {kind: [s for s in spans if s[1] == kind] for kind in ("chunk", "unit", "check")}
    first, end = min(s[2] for s in spans), max(s[3] for s in spans)
    last_chunk = max(s[3] for s in of["chunk"])
    gaps = []  # per process: idle time between its tasks, before the last chunk ended
    for pid in {s[0] for s in spans}:
        mine = sorted((s[2], s[3]) for s in spans if s[0] == pid and s[2] < last_chunk)
        gaps += [b[0] - a[1] for a, b in zip(mine, mine[1:])]
    n = max(1, min(workers, len({s[0] for s in spans})))
    window = last_chunk - first
    d = [b - a for a, b in zip(u0, u1)]
    took = {k: sum(s[3] - s[2] for s in v) for k, v in of.items()}
    return {
        "workers": workers, "wall": wall, "tokens": r.manifest["totals"]["tokens"],
        "backend": r.manifest["tokenizer"]["backend"], "phases": r.phases, "to_first_task": first - engine_t0,
        "chunk_window": window, "chunks": len(of["chunk"]), "units": len(of["unit"]),
        "busy_in_window": sum(s[3] - s[2] for s in spans if s[2] < last_chunk) / (n * window) if window > 0 else 1.0,
        "chunk_s": took["chunk"], "unit_s": took["unit"], "check_on_worker": took["check"],
        "last_post": (max(S["posted"]) - first) if S["posted"] else 0.0,
        "tail": end - last_chunk, "after_tasks": (t0 + wall) - end,
        "main_cpu": d[0], "workers_cpu": d[1], "main_sys": d[2], "workers_sys": d[3], "minflt": int(d[4]),
        "gap_mean_ms": 1e3 * sum(gaps) / len(gaps) if gaps else 0.0, "gap_max_ms": 1e3 * max(gaps, default=0.0),
        "pool_start": S["cpu"].get("pool start s", 0.0), "reader_cpu": S["cpu"].get("reader", 0.0),
        "loop_cpu": S["cpu"].get("event loop", 0.0), "spill_write": S["cpu"].get("main spill write", 0.0),
        "gb": gb, "split": _split(wcpu, gb), "reader": "workers" if by_workers else "thread",
    }


def _share(args):
    """One forked process's share of the ceiling: encode its texts, all shares starting together."""
    texts, encoder, start_at = S["ceiling"]
    mine = [texts[j] for j in args]
    start_together(start_at)
    t0, c0 = time.monotonic(), time.process_time()
    tokens = sum(len(encoder.encode_flat(mine[b : b + 64])[0]) for b in range(0, len(mine), 64))
    return t0, time.monotonic(), time.process_time() - c0, tokens


def ceiling(inputs: list[str], tokenizer: str | None, n: int) -> dict:
    """The host's own ceiling for the build's work: n forked processes, each encoding its share of the
    texts (in memory; shares balanced by length, longest first to the least loaded) with the build's
    encoder; no reading, packing or writing. Wall = first start to last end."""
    from packer.tokenize import Encoder, choose_backend, resolve_tokenizer

    texts = corpus_texts(inputs)
    info = choose_backend(resolve_tokenizer(tokenizer), "auto", lambda: texts[:200])
    shares: list[list[int]] = [[] for _ in range(n)]
    load = [0] * n
    for j in sorted(range(len(texts)), key=lambda j: -len(texts[j])):
        k = load.index(min(load))
        shares[k].append(j)
        load[k] += len(texts[j])
    S["ceiling"] = (texts, Encoder(info), time.monotonic() + 0.5)
    with mp.get_context("fork").Pool(n) as pool:
        res = pool.map(_share, [sorted(s) for s in shares])
    return {"workers": n, "wall": max(r[1] for r in res) - min(r[0] for r in res), "tokens": sum(r[3] for r in res),
            "cpu": sum(r[2] for r in res), "backend": info.backend, "longest_text_share": max(load) / sum(load)}


def clock(n: int, seconds: float = 1.0) -> dict:
    """The host's core speed with n cores busy at once: n forked processes run the same pure integer
    loop (no memory traffic). If one core alone runs it faster than each of n together, the host lowers
    its clock under load, and no program's n-worker run can reach n times its one-worker speed there."""
    with mp.get_context("fork").Pool(n) as pool:
        res = pool.map(spin, [seconds] * n)
    return {"workers": n, "wall_mean": sum(r[0] for r in res) / n, "cpu_mean": sum(r[1] for r in res) / n}


def cli(inputs: list[str], tokenizer: str | None, n: int, loaded: int = 0) -> dict:
    """``packer build --workers n`` as a user runs it: a new process, pinned to n cores, end to end.
    ``loaded``: that many other cores run a busy loop meanwhile (a 1-worker build at the all-core clock)."""
    spinners = [subprocess.Popen(pin(1, n + i) + [sys.executable, "-c", "while True: pass"]) for i in range(loaded)]
    time.sleep(0.3 if loaded else 0)  # let the host settle at its all-core clock
    tmp = tempfile.mkdtemp(prefix="trace-cli-")
    cmd = pin(n) + [sys.executable, "-m", "packer.cli", "build", *inputs, os.path.join(tmp, "out"), "--workers", str(n),
                    "-q", "--summary-json", os.path.join(tmp, "s.json")] + (["--tokenizer", tokenizer] if tokenizer else [])
    try:
        t0 = time.monotonic()
        subprocess.run(cmd, check=True)
        wall = time.monotonic() - t0
        with open(os.path.join(tmp, "s.json")) as f:
            tokens = json.load(f).get("totals", {}).get("tokens", 0)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"workers": n, "wall": wall, "tokens": tokens}


def _row(f: dict) -> str:
    ph = "  ".join(f"{k} {v:.2f}" for k, v in f["phases"].items())
    return (f"x{f['workers']:<3} wall {f['wall']:6.2f}s  {f['tokens'] / f['wall'] / 1e6:6.2f} Mtok/s  [{f['backend']}]\n"
            f"      steps: {ph}\n"
            f"      engine start -> first task {f['to_first_task']:.2f}s (starting the pool {f['pool_start']:.2f}s); "
            f"chunks {f['chunks']} in {f['chunk_window']:.2f}s (workers busy {100 * f['busy_in_window']:.0f}%; reader "
            f"posted its last chunk at {f['last_post']:.2f}s); tail after the last chunk {f['tail']:.2f}s; after the "
            f"last task {f['after_tasks']:.2f}s\n"
            f"      task seconds: chunks {f['chunk_s']:.2f}, units {f['unit_s']:.2f} ({f['units']}), input check on a "
            f"worker {f['check_on_worker']:.2f}; CPU s: main process {f['main_cpu']:.2f} (system {f['main_sys']:.2f}), "
            f"workers {f['workers_cpu']:.2f} (system {f['workers_sys']:.2f}); page faults {f['minflt']:,}\n"
            f"      main process threads, CPU s: reader {f['reader_cpu']:.2f}, event loop {f['loop_cpu']:.2f} (the rest "
            f"is the pool's threads: pickling, pipes); a worker's gap between tasks: mean {f['gap_mean_ms']:.1f} ms, "
            f"max {f['gap_max_ms']:.0f} ms\n"
            f"      CPU s per GB of text ({f['gb']:.3f} GB; jsonl read by the {f['reader']}): main process "
            f"{f['main_cpu'] / f['gb']:.2f} (reader thread {f['reader_cpu'] / f['gb']:.2f}, its spill writes "
            f"{f['spill_write'] / f['gb']:.2f}), workers {f['workers_cpu'] / f['gb']:.2f}: "
            + ", ".join(f"{k} {v:.2f}" for k, v in f["split"].items()))


def _scaling(label: str, got: dict, loaded: list) -> None:
    best = {n: min(fs, key=lambda f: f["wall"]) for n, fs in got.items()}
    lo, top = min(best), max(best)
    print(f"\n{label}: scaling over {lo} worker(s), best rounds (wall at {lo} / (N / {lo} x wall at N)):")
    for n, f in sorted(best.items()):
        per = sorted(a["wall"] / b["wall"] / (n / lo) for a, b in zip(got[lo], got[n]))  # builds run side by side
        print(f"  x{n}: {best[lo]['wall'] / f['wall']:5.2f}x faster = {best[lo]['wall'] / f['wall'] / (n / lo):.2f} of "
              f"linear; per round {', '.join(f'{e:.2f}' for e in per)} (median {per[len(per) // 2]:.2f})")
    if loaded:
        per = sorted(a["wall"] / b["wall"] / top for a, b in zip(loaded, got[top]))
        print(f"  x{top} over x1 with {top - 1} other cores busy (linear at the all-core clock): per round "
              f"{', '.join(f'{e:.2f}' for e in per)}")


def _against(ref: str, argv: list[str], rounds: int) -> None:
    """This script on ``ref``'s packer and on this tree's, alternately, ``rounds`` times (``--rounds 1`` each)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    tree = tempfile.mkdtemp(prefix="trace-base-")
    try:
        archive = subprocess.run(["git", "-C", here, "archive", ref, "packer"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        drop = {i for i, a in enumerate(argv) if a == "--rounds"}
        argv = [a for i, a in enumerate(argv) if i not in drop and i - 1 not in drop and not a.startswith("--rounds=")]
        for rnd in range(rounds):
            for label, env in ((f"base {ref}", {"PACKER_TRACE_TREE": tree}), ("this tree", {})):
                print(f"=== round {rnd}: {label}", flush=True)
                subprocess.run([sys.executable, os.path.abspath(__file__), *argv], check=True,
                               env={k: v for k, v in os.environ.items() if k != "PACKER_TRACE_TREE"} | env)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--tokenizer")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--ceiling", action="store_true", help="also time N processes encoding the texts in memory")
    ap.add_argument("--cli-only", action="store_true", help="time `packer build` (pinned to N cores), not a traced build")
    ap.add_argument("--clock", action="store_true", help="also time a pure integer loop on 1 and on N cores at once")
    ap.add_argument("--loaded", action="store_true",
                    help="with --cli-only: also the 1-worker build while the other N-1 cores run a busy loop")
    ap.add_argument("--reader", choices=("workers", "thread", "both"), default="workers",
                    help="who reads jsonl: the workers (packer's way), the main process's reader thread, both in turn")
    ap.add_argument("--fastokens", action="store_true", help="auto picks fastokens whatever the input's size")
    ap.add_argument("--resume-check", action="store_true", help="time a resume's consumed-bytes check (issue 41.8) "
                    "against reading the same input as a build does")
    ap.add_argument("--base", metavar="REF", help="trace the packer of git REF too (git archive), each round REF then "
                    "this tree, in turn (one process each)")
    args = ap.parse_args(argv)
    if args.base:
        return _against(args.base, [a for a in (argv or sys.argv[1:]) if a not in ("--base", args.base)], args.rounds)
    if args.fastokens:
        importlib.import_module("packer.tokenize.backend").fastokens_backend.OVER_TIKTOKEN = 0  # any size
    if args.resume_check:
        from packer.formats import discover, iter_parts, plan_slices
        from packer.formats import consumed_digest as digest
        sls = [s for s, _ in plan_slices(discover(args.inputs).files, 64 << 20)]
        t0 = time.perf_counter(); n = sum(p.nbytes for s in sls for p in iter_parts(s)); t1 = time.perf_counter()  # noqa: E702
        all(digest(s) for s in sls); t2 = time.perf_counter()  # noqa: E702
        return print(f"{n / 1e9:.2f} GB, {len(sls)} slices: check {t2 - t1:.2f} s, read {t1 - t0:.2f} s, x{(t2 - t1) / (t1 - t0):.3f}")
    if args.ceiling:
        ceil = {n: ceiling(args.inputs, args.tokenizer, n) for n in args.workers}
        lo = min(ceil)
        for n, c in sorted(ceil.items()):
            of = f" = {ceil[lo]['wall'] / c['wall'] / (n / lo):.2f} of linear over x{lo}" if n != lo else ""
            print(f"ceiling x{n}: {c['tokens'] / c['wall'] / 1e6:6.2f} Mtok/s ({c['wall']:.2f}s, cpu {c['cpu']:.2f}s; "
                  f"largest share {100 * c['longest_text_share']:.1f}% of the text) [{c['backend']}]{of}", flush=True)
    if args.clock:
        clk = {n: clock(n) for n in sorted(set([1] + args.workers))}
        for n, c in clk.items():
            print(f"clock x{n}: the loop took {c['cpu_mean']:.3f} CPU s a process ({c['wall_mean']:.3f} s wall) = "
                  f"{clk[1]['cpu_mean'] / c['cpu_mean']:.2f} of one core alone's speed", flush=True)
    _install()
    runs, clis, loaded = {}, {}, []
    top = max(args.workers)
    if not args.cli_only:  # untimed: the input check's record in place, the files in the page cache
        trace(args.inputs, args.tokenizer, top)
    for rnd in range(args.rounds):
        for n in args.workers:
            if not args.cli_only:
                both = {}
                for spans in {"workers": (True,), "thread": (False,), "both": (False, True)}[args.reader]:
                    f = both[spans] = trace(args.inputs, args.tokenizer, n, spans)
                    print(f"round {rnd} " + _row(f), flush=True)
                runs.setdefault(n, []).append(f)
                if len(both) == 2:
                    a, b = both[False], both[True]
                    print(f"      x{n} reader thread -> workers, CPU s per GB: main process {a['main_cpu'] / a['gb']:.2f}"
                          f" -> {b['main_cpu'] / b['gb']:.2f}; whole build {(a['main_cpu'] + a['workers_cpu']) / a['gb']:.2f}"
                          f" -> {(b['main_cpu'] + b['workers_cpu']) / b['gb']:.2f}; wall {a['wall']:.2f} -> "
                          f"{b['wall']:.2f} s", flush=True)
            if args.cli_only:
                c = cli(args.inputs, args.tokenizer, n)
                clis.setdefault(n, []).append(c)
                print(f"round {rnd} x{n:<3} packer build (CLI): {c['wall']:6.2f}s  "
                      f"{c['tokens'] / c['wall'] / 1e6:6.2f} Mtok/s", flush=True)
                if args.loaded and n == 1 and top > 1:
                    loaded.append(cli(args.inputs, args.tokenizer, 1, loaded=top - 1))
                    c = loaded[-1]
                    print(f"round {rnd} x1   packer build (CLI), {top - 1} other cores busy: {c['wall']:6.2f}s  "
                          f"{c['tokens'] / c['wall'] / 1e6:6.2f} Mtok/s", flush=True)
    if runs:
        _scaling("in-process builds", runs, [])
    if clis:
        _scaling("packer build (CLI)", clis, loaded if top in clis else [])


if __name__ == "__main__":
    main()
