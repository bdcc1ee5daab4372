"""Does encoding cost more CPU per token when all cores encode at once, and does a private copy of
the encoder's tables change that?

Weak scaling with nothing of packer's build around it: N forked processes, each pinned to its own
core, each encode the *same* texts (``--mb`` of the corpus, from memory, in the build's batches)
with the build's encoder, all starting together. Any CPU second a process needs at N beyond what
the lone process needs for identical work is the host's: a lower clock under load, or shared
cache and memory bandwidth. Two ways to hold the encoder:

- ``shared``: built once in the parent and inherited, as packer's workers get it (its tables are the
  parent's pages, one copy in memory for all);
- ``private``: rebuilt in each child after the fork, from the same conversion (its own tables, in
  memory that the child itself touched first);
- ``jsonl``: ``shared``, each batch first parsed from JSON lines in memory (orjson, as a build's worker does): the
  most a build that reads JSON can reach with an encoder that takes Python strings (billion.py's second ceiling).

Beside them, the pure integer loop of ``build_trace.py --clock`` (no memory traffic): its inflation
is the clock's share. Rounds alternate the orders, so drift in the host's speed falls on both.

    python bench/encode_scaling.py bench_out/real/real.jsonl --tokenizer ../shared/data/llama3 --workers 16

Printed per run: each process's CPU seconds (mean, max) and wall, and at N the inflation (CPU at N over CPU at 1,
same texts) and the efficiency (wall at 1 over the slowest process at N), then a JSON line per mode (``--json``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common import char_batches, corpus_texts, emit_json, spin, start_together  # noqa: E402

_STATE: dict = {}


def _core_for(i: int) -> int:
    cores = sorted(os.sched_getaffinity(0))
    return cores[i % len(cores)]


def _work(args):
    """One process: pin to core ``i``, (re)build the encoder if asked, wait for the common start,
    then encode every batch. Returns (cpu s, wall s, tokens)."""
    i, mode, start_at = args
    os.sched_setaffinity(0, {_STATE["cores"][i]})
    if mode == "loop":
        wall, cpu = spin(_STATE["loop_s"], start_at)
        return cpu, wall, 0
    enc = _STATE["encoder"]
    if mode == "private":
        from packer.tokenize.backend import TiktokenEncoder

        tk = enc.tiktoken
        enc._tk = TiktokenEncoder(tk._json, tk.conv, None, tk.split_special)  # new Rust tables, this child's pages
    start_together(start_at)
    t0, c0 = time.monotonic(), time.process_time()
    tokens, parse = 0, (lambda blob: [orjson.loads(line)["text"] for line in blob.split(b"\n")]) if mode == "jsonl" else None
    for b in _STATE["jsonl"] if parse else _STATE["batches"]:
        tokens += len(enc.encode_flat(parse(b) if parse else b)[0])
    return time.process_time() - c0, time.monotonic() - t0, tokens


def run(mode: str, n: int) -> dict:
    """``n`` processes of ``mode`` at once; the start is 1 s ahead, so a private rebuild finishes first."""
    with mp.get_context("fork").Pool(n) as pool:
        res = pool.map(_work, [(i, mode, time.monotonic() + 1.0) for i in range(n)])
    cpu = [r[0] for r in res]
    wall = [r[1] for r in res]
    return {"mode": mode, "n": n, "cpu_mean": sum(cpu) / n, "cpu_max": max(cpu), "wall_mean": sum(wall) / n,
            "wall_max": max(wall), "tokens": res[0][2]}


def prepare(tokenizer: str, texts: list[str], mb: float, workers: int, backend: str = "tiktoken",
            loop_s: float = 1.0) -> tuple[int, int]:
    """Load ``_STATE`` for ``run``: the first ``mb`` MB of ``texts`` in the build's ~256 KB batches, the
    build's encoder (``backend``), one core per process. Returns (texts, characters) per process."""
    from packer.tokenize import Encoder, choose_backend, resolve_tokenizer

    picked, size = [], 0
    for t in texts:
        if size >= mb * 1e6:
            break
        picked.append(t)
        size += len(t)
    info = choose_backend(resolve_tokenizer(tokenizer), backend, lambda: texts[:200])
    batches = char_batches(picked, 256 << 10)
    _STATE.update(encoder=Encoder(info), batches=batches, loop_s=loop_s, cores=[_core_for(i) for i in range(workers)],
                  jsonl=[b"\n".join(orjson.dumps({"text": t}) for t in b) for b in batches])
    return len(picked), size


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--tokenizer", required=True, help="a tokenizer that packer encodes with tiktoken")
    ap.add_argument("--workers", type=int, default=16, help="N, besides 1")
    ap.add_argument("--mb", type=float, default=20, help="text each process encodes (MB of characters)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--loop-s", type=float, default=1.0, help="the integer loop's length on a lone core (about)")
    ap.add_argument("--json", help="append the figures as JSON lines to this file")
    args = ap.parse_args(argv)

    texts = corpus_texts(args.inputs)
    picked, size = prepare(args.tokenizer, texts, args.mb, args.workers, loop_s=args.loop_s)
    batches = _STATE["batches"]
    n = args.workers
    print(f"{args.tokenizer}: {picked} texts, {size / 1e6:.1f} M chars per process, {len(batches)} batches; "
          f"cores {_STATE['cores']}", flush=True)
    rows: dict = {}
    for r in range(args.rounds):
        order = ["loop", "shared", "private"] if r % 2 == 0 else ["private", "shared", "loop"]
        for mode in order:
            pair = [1, n] if r % 2 == 0 else [n, 1]
            for k in pair:
                f = run(mode, k)
                rows.setdefault((mode, k), []).append(f)
                print(f"round {r} {mode:7} x{k:<3} cpu {f['cpu_mean']:6.2f}s (max {f['cpu_max']:.2f})  wall {f['wall_mean']:6.2f}s "
                      f"(max {f['wall_max']:.2f})", flush=True)
    print(f"\n{'mode':8} {'CPU at 1':>9} {'CPU at ' + str(n):>9} {'inflation':>9} {'efficiency':>10}   (per round)")
    for mode in ("loop", "shared", "private"):
        one, many = rows[(mode, 1)], rows[(mode, n)]
        infl = [m["cpu_mean"] / o["cpu_mean"] for o, m in zip(one, many)]
        eff = [o["wall_max"] / m["wall_max"] for o, m in zip(one, many)]
        print(f"{mode:8} {min(o['cpu_mean'] for o in one):9.2f} {min(m['cpu_mean'] for m in many):9.2f} "
              f"{' '.join(f'{x:.2f}' for x in infl):>9} {' '.join(f'{x:.2f}' for x in eff):>10}")
        emit_json({"bench": "encode_scaling", "tokenizer": args.tokenizer, "mode": mode, "n": n, "mb": args.mb,
                   "inflation": infl, "efficiency": eff, "cpu_1": [o["cpu_mean"] for o in one],
                   "cpu_n": [m["cpu_mean"] for m in many]}, args.json)


if __name__ == "__main__":
    main()
