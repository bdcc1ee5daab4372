"""Where a many-core build's wall time goes: every task of one build, on a timeline.

Runs ``packer.build`` in this process with ``--workers N`` and records:

- the build's serial steps (``BuildResult.phases``: tokenizer load, discovery,
  engine check, output, workers, manifest);
- every task a worker ran (``encode_chunk``: parse and tokenize ~256 KB;
  ``assemble_unit``: pack and write one shard), with its process and its
  start and end on the shared monotonic clock;
- when the reader thread posted each chunk, and the main process's CPU
  seconds (all its threads: reader, event loop, pickling) while the workers ran.

From those it prints what bounds the speed-up: the time before the first
task starts (serial start-up), how busy the workers are between the first
and the last chunk, how long chunks wait for a free worker or workers wait
for a chunk, and the tail after the last chunk (the last shard's packing
and writing). Run it for 1 and N workers on the same corpus:

    python bench/build_trace.py bench_out/real/real.jsonl --tokenizer ../shared/data/llama3 --workers 1 16

What the host itself gives, measured in the same call: ``--ceiling`` (N
processes encoding the texts from memory, nothing else), ``--clock`` (a pure
integer loop on 1 and on N cores at once: a host that slows its cores when all
of them work caps every program's N-fold speed-up), and ``--loaded`` with
``--cli-only`` (the 1-worker build while the other cores spin, for a linear
baseline at the all-core clock).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import importlib  # noqa: E402

local = importlib.import_module("packer.pipeline.local")  # (packer.build is also the build function's name)

_TRACE_DIR = None  # set before the build; forked workers inherit it
_posted: list[float] = []  # monotonic times the reader posted a chunk (this process)


_depth = [0]  # traced calls in progress in this process: only the outermost is recorded


def _span(kind, fn, name):
    def traced(*args):
        t0 = time.monotonic()
        _depth[0] += 1
        try:
            return fn(*args)
        finally:
            _depth[0] -= 1
            if not _depth[0]:
                with open(os.path.join(_TRACE_DIR, f"{os.getpid()}.jsonl"), "a") as f:
                    f.write(json.dumps([kind, t0, time.monotonic()]) + "\n")
    traced.__name__ = traced.__qualname__ = name
    return traced


# The task functions of the engine, traced (module-level names: pool tasks pickle them by name).
# Where chunk tokens go through files (packer/pipeline/spill.py), the tasks that write and map them.
_TASKS = {"encode_chunk": "chunk", "assemble_unit": "unit", "_encode_here": "chunk", "_encode_to": "chunk",
          "_assemble_from": "unit"}
for _name, _kind in _TASKS.items():
    if hasattr(local, _name):
        globals()[f"traced_{_name}"] = _span(_kind, getattr(local, _name), f"traced_{_name}")
_build_pkg = sys.modules["packer.pipeline"]
if hasattr(_build_pkg, "check_input"):  # the engine check on input texts, run on a worker
    traced_check_input = _span("check", _build_pkg.check_input, "traced_check_input")


class _Posted(local.ChunkRead):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _posted.append(time.monotonic())


_thread_cpu: dict[str, float] = {}  # CPU seconds of the main process's reader thread and event loop


def _thread_timed(name, fn):
    def timed(*args):
        t0 = time.thread_time()
        try:
            return fn(*args)
        finally:
            _thread_cpu[name] = _thread_cpu.get(name, 0.0) + time.thread_time() - t0
    return timed


def _timed_pool(fn):
    def make(*args):
        t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            _thread_cpu["pool start s"] = time.monotonic() - t0
    return make


def _install() -> None:
    local._make_pool = _timed_pool(local._make_pool)
    local._read_units = _thread_timed("reader", local._read_units)
    local._run = _thread_timed("event loop", local._run)
    # The outermost task function of each kind is traced (spill writes count as the chunk's work).
    outer = {"chunk": "_encode_to" if hasattr(local, "_encode_to") else "encode_chunk",
             "unit": "_assemble_from" if hasattr(local, "_assemble_from") else "assemble_unit"}
    for name in outer.values():
        setattr(local, name, globals()[f"traced_{name}"])
    if hasattr(local, "_encode_here"):
        local._encode_here = globals()["traced__encode_here"]
    if hasattr(local, "_encode_to"):  # in-process runs assemble with assemble_unit itself
        local.assemble_unit = globals()["traced_assemble_unit"]
    local.ChunkRead = _Posted
    if hasattr(_build_pkg, "check_input"):
        _build_pkg.check_input = traced_check_input


def _fresh_process_state() -> None:
    """Forget what this process parsed or checked in a previous build, as a new `packer build`
    process would (its records on disk, PACKER_CACHE, stay)."""
    tok = importlib.import_module("packer.tokenize.tokenizer")
    te = importlib.import_module("packer.tokenize.tiktoken_backend")
    unit = importlib.import_module("packer.pipeline.unit")
    for d in (tok._LOADED, getattr(tok, "_CUT_RULE", {}), te._STATIC, te._ENCODERS):
        d.clear()
    unit._encoder = None


def trace(inputs: list[str], tokenizer: str | None, workers: int, extra: dict) -> dict:
    """One build, traced; returns the figures (seconds)."""
    global _TRACE_DIR
    from packer import build

    tmp = tempfile.mkdtemp(prefix="trace-")
    _TRACE_DIR = os.path.join(tmp, "spans")
    os.makedirs(_TRACE_DIR)
    _posted.clear()
    _thread_cpu.clear()
    _fresh_process_state()
    try:
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        r = build(inputs, os.path.join(tmp, "out"), tokenizer=tokenizer, workers=workers, quiet=True, **extra)
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        spans = []
        for name in os.listdir(_TRACE_DIR):
            pid = int(name.split(".")[0])
            with open(os.path.join(_TRACE_DIR, name)) as f:
                spans += [(pid, *json.loads(line)) for line in f]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ph = r.phases
    names = list(ph)
    before = sum(ph[k] for k in names[: names.index("units (workers)")])  # the steps before the engine ran
    engine_t0 = t0 + before
    chunks = sorted(s for s in spans if s[1] == "chunk")
    checks = [s[3] - s[2] for s in spans if s[1] == "check"]
    units = sorted(s for s in spans if s[1] == "unit")
    first = min(s[2] for s in spans)
    last_chunk = max(s[3] for s in chunks)
    end = max(s[3] for s in spans)
    busy = sum(s[3] - s[2] for s in spans if s[2] < last_chunk)
    gaps = []  # per process: idle time between its tasks, before the last chunk ended
    for pid in {s[0] for s in spans}:
        mine = sorted((s[2], s[3]) for s in spans if s[0] == pid and s[2] < last_chunk)
        gaps += [b[0] - a[1] for a, b in zip(mine, mine[1:])]
    procs = {s[0] for s in spans}
    n = max(1, min(workers, len(procs)))
    window = last_chunk - first
    self_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    child_cpu = (ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime)
    child_sys = ch1.ru_stime - ch0.ru_stime
    self_sys = ru1.ru_stime - ru0.ru_stime
    return {
        "workers": workers, "wall": wall, "tokens": r.manifest["totals"]["tokens"],
        "backend": r.manifest["tokenizer"]["backend"], "phases": ph,
        "to_first_task": first - engine_t0, "chunk_window": window,
        "busy_in_window": busy / (n * window) if window > 0 else 1.0,
        "chunk_s": sum(s[3] - s[2] for s in chunks), "unit_s": sum(s[3] - s[2] for s in units),
        "chunks": len(chunks), "units": len(units), "check_on_worker": sum(checks),
        "last_post": (max(_posted) - first) if _posted else 0.0,
        "tail": end - last_chunk, "after_tasks": (t0 + wall) - end,
        "main_cpu": self_cpu, "workers_cpu": child_cpu, "main_sys": self_sys, "workers_sys": child_sys,
        "gap_mean_ms": 1e3 * sum(gaps) / len(gaps) if gaps else 0.0, "gap_max_ms": 1e3 * max(gaps, default=0.0),
        "pool_start": _thread_cpu.get("pool start s", 0.0), "reader_cpu": _thread_cpu.get("reader", 0.0), "loop_cpu": _thread_cpu.get("event loop", 0.0),
        "minflt": ru1.ru_minflt - ru0.ru_minflt + ch1.ru_minflt - ch0.ru_minflt,
    }


def _share(args):
    """One forked process's share of the ceiling: encode every n-th text, from a common start time."""
    texts, shares, encoder, start_at = _CEILING
    i, n = args
    while time.monotonic() < start_at:  # all shares start together
        time.sleep(0.001)
    t0, c0 = time.monotonic(), time.process_time()
    mine = [texts[j] for j in shares[i]]
    tokens = 0
    for b in range(0, len(mine), 64):
        tokens += len(encoder.encode_flat(mine[b : b + 64])[0])
    return t0, time.monotonic(), time.process_time() - c0, tokens


_CEILING = None


def ceiling(inputs: list[str], tokenizer: str | None, n: int) -> dict:
    """The host's own ceiling for the build's work: n forked processes, each encoding its share of
    the texts (already in memory; shares balanced by length, longest first to the least loaded)
    with the build's encoder; no reading, packing or writing. Wall = first start to last end."""
    global _CEILING
    import multiprocessing as mp

    from common import corpus_texts
    from packer.tokenize import Encoder, choose_backend, resolve_tokenizer

    texts = corpus_texts(inputs)
    info = choose_backend(resolve_tokenizer(tokenizer), "auto", lambda: texts[:200])
    shares: list[list[int]] = [[] for _ in range(n)]
    load = [0] * n
    for j in sorted(range(len(texts)), key=lambda j: -len(texts[j])):
        k = load.index(min(load))
        shares[k].append(j)
        load[k] += len(texts[j])
    _CEILING = (texts, [sorted(s) for s in shares], Encoder(info), time.monotonic() + 0.5)
    with mp.get_context("fork").Pool(n) as pool:
        res = pool.map(_share, [(i, n) for i in range(n)])
    wall = max(r[1] for r in res) - min(r[0] for r in res)
    return {"workers": n, "wall": wall, "tokens": sum(r[3] for r in res), "cpu": sum(r[2] for r in res),
            "backend": info.backend, "longest_share": max(r[1] - r[0] for r in res),
            "longest_text_share": max(load) / sum(load)}


def _spin(seconds: float) -> tuple[float, float]:
    """A fixed amount of pure-Python integer work (a few KB of memory): its wall and CPU seconds."""
    t0, c0 = time.monotonic(), time.process_time()
    x = 0
    for i in range(int(seconds * 2e7)):
        x ^= i * 2654435761 & 0xFFFF
    return time.monotonic() - t0, time.process_time() - c0


def clock(n: int, seconds: float = 1.0) -> dict:
    """The host's core speed with n cores busy at once: n forked processes run the same pure
    integer loop, which needs no memory bandwidth and no shared cache. If one core alone runs it
    faster than each of n cores together, the host lowers its clock under load (turbo), and no
    program's n-worker run can reach n times its one-worker speed there."""
    import multiprocessing as mp

    with mp.get_context("fork").Pool(n) as pool:
        res = pool.map(_spin, [seconds] * n)
    return {"workers": n, "wall_mean": sum(r[0] for r in res) / n, "cpu_mean": sum(r[1] for r in res) / n}


def _spinners(first: int, count: int) -> list:
    """``count`` busy loops pinned to cores first.. first+count-1 (the load of a busy host)."""
    import subprocess

    from common import pin

    return [subprocess.Popen(pin(1, first + i) + [sys.executable, "-c", "while True: pass"]) for i in range(count)]


def cli(inputs: list[str], tokenizer: str | None, n: int, loaded: int = 0) -> dict:
    """``packer build --workers n`` as a user runs it: a new process, pinned to n cores, end to end.
    ``loaded``: that many other cores run a busy loop meanwhile (so a 1-worker build runs at the
    clock the host gives when all its cores work, as each worker of a 16-worker build does)."""
    import subprocess

    from common import pin

    spinners = _spinners(n, loaded) if loaded else []
    time.sleep(0.3 if loaded else 0)  # let the host settle at its all-core clock
    tmp = tempfile.mkdtemp(prefix="trace-cli-")
    cmd = pin(n) + [sys.executable, "-m", "packer.cli", "build", *inputs, os.path.join(tmp, "out"), "--workers", str(n),
                    "-q", "--summary-json", os.path.join(tmp, "s.json")] + (["--tokenizer", tokenizer] if tokenizer else [])
    try:
        t0 = time.monotonic()
        subprocess.run(cmd, check=True)
        wall = time.monotonic() - t0
        with open(os.path.join(tmp, "s.json")) as f:
            summary = json.load(f)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"workers": n, "wall": wall, "tokens": summary["totals"]["tokens"] if "totals" in summary else 0}


def _row(f: dict) -> str:
    ph = "  ".join(f"{k} {v:.2f}" for k, v in f["phases"].items())
    return (f"x{f['workers']:<3} wall {f['wall']:6.2f}s  {f['tokens'] / f['wall'] / 1e6:6.2f} Mtok/s  [{f['backend']}]\n"
            f"      steps: {ph}\n"
            f"      engine start -> first task {f['to_first_task']:.2f}s (starting the pool {f['pool_start']:.2f}s); chunks {f['chunks']} in {f['chunk_window']:.2f}s "
            f"(workers busy {100 * f['busy_in_window']:.0f}%; reader posted its last chunk at {f['last_post']:.2f}s); "
            f"tail after the last chunk {f['tail']:.2f}s; after the last task {f['after_tasks']:.2f}s\n"
            f"      task seconds: chunks {f['chunk_s']:.2f}, units {f['unit_s']:.2f} ({f['units']}), "
            f"input check on a worker {f['check_on_worker']:.2f}; "
            f"CPU s: main process {f['main_cpu']:.2f} (system {f['main_sys']:.2f}), workers {f['workers_cpu']:.2f} "
            f"(system {f['workers_sys']:.2f}); page faults {f['minflt']:,}\n"
            f"      main process threads, CPU s: reader {f['reader_cpu']:.2f}, event loop {f['loop_cpu']:.2f} "
            f"(the rest of the main process's is the pool's threads: pickling, pipes); a worker's gap between "
            f"tasks: mean {f['gap_mean_ms']:.1f} ms, max {f['gap_max_ms']:.0f} ms")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--tokenizer")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--ceiling", action="store_true",
                    help="also time the host's ceiling: N processes encoding the texts in memory, nothing else")
    ap.add_argument("--cli", action="store_true",
                    help="also time `packer build` itself (a new process per build, pinned to N cores), each round")
    ap.add_argument("--cli-only", action="store_true", help="time `packer build` only (no traced build)")
    ap.add_argument("--clock", action="store_true",
                    help="also time a pure integer loop on 1 and on N cores at once (does the host slow its "
                         "cores down when all of them work?)")
    ap.add_argument("--loaded", action="store_true",
                    help="with --cli/--cli-only: also time the 1-worker build while the other N-1 cores run a "
                         "busy loop, and give the N-worker scaling over that too")
    ap.add_argument("--part-kb", type=int, default=0,
                    help="an experiment: input per chunk in the local engine (packer's PART_BYTES is 256 KB)")
    ap.add_argument("--mmap-threshold-kb", type=int, default=0,
                    help="an experiment: glibc's mmap threshold in the workers (packer fixes it at 4 MB)")
    ap.add_argument("--json", help="append the figures as JSON lines to this file")
    args = ap.parse_args(argv)
    if args.part_kb:
        local.PART_BYTES = args.part_kb << 10
    if args.mmap_threshold_kb:  # read by bounded_malloc in each (forked) worker
        importlib.import_module("packer.pipeline.unit").MMAP_THRESHOLD = args.mmap_threshold_kb << 10
    if args.ceiling:
        ceil = {n: ceiling(args.inputs, args.tokenizer, n) for n in args.workers}
        lo = min(ceil)
        for n, c in sorted(ceil.items()):
            eff = ceil[lo]["wall"] / c["wall"] / (n / lo)
            of = f" = {eff:.2f} of linear over x{lo}" if n != lo else ""
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
    for rnd in range(args.rounds):
        for n in args.workers:
            if not args.cli_only:
                f = trace(args.inputs, args.tokenizer, n, {})
                runs.setdefault(n, []).append(f)
                print(f"round {rnd} " + _row(f), flush=True)
                if args.json:
                    with open(args.json, "a") as fh:
                        fh.write(json.dumps(f) + "\n")
            if args.cli or args.cli_only:
                c = cli(args.inputs, args.tokenizer, n)
                clis.setdefault(n, []).append(c)
                print(f"round {rnd} x{n:<3} packer build (CLI): {c['wall']:6.2f}s  "
                      f"{c['tokens'] / c['wall'] / 1e6:6.2f} Mtok/s", flush=True)
                if args.loaded and n == 1 and top > 1:
                    c = cli(args.inputs, args.tokenizer, 1, loaded=top - 1)
                    loaded.append(c)
                    print(f"round {rnd} x1   packer build (CLI), {top - 1} other cores busy: {c['wall']:6.2f}s  "
                          f"{c['tokens'] / c['wall'] / 1e6:6.2f} Mtok/s", flush=True)
    for label, got in (("in-process builds", runs), ("packer build (CLI)", clis)):
        if not got:
            continue
        best = {n: min(fs, key=lambda f: f["wall"]) for n, fs in got.items()}
        lo = min(best)
        print(f"\n{label}: scaling over {lo} worker(s), best rounds (wall at {lo} / (N / {lo} x wall at N)):")
        for n, f in sorted(best.items()):
            eff = best[lo]["wall"] / f["wall"] / (n / lo)
            # and per round, from the builds run next to each other in time
            per = sorted(a["wall"] / b["wall"] / (n / lo) for a, b in zip(got[lo], got[n]))
            print(f"  x{n}: {best[lo]['wall'] / f['wall']:5.2f}x faster = {eff:.2f} of linear; per round "
                  f"{', '.join(f'{e:.2f}' for e in per)} (median {per[len(per) // 2]:.2f})")
        if loaded and label.startswith("packer") and top in got:
            per = sorted(a["wall"] / b["wall"] / top for a, b in zip(loaded, got[top]))
            print(f"  x{top} over x1 with {top - 1} other cores busy (linear at the all-core clock): per round "
                  f"{', '.join(f'{e:.2f}' for e in per)}")


if __name__ == "__main__":
    main()
