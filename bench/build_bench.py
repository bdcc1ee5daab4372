"""End-to-end `packer build` against the tokenizer's own ceiling, side by side.

For each worker count N (default 1 and 2), interleaved over ``--rounds``:

- ceiling: HF tokenizers encoding the corpus's texts (read by ``packer.formats``, so exactly what the
  build tokenizes), already in memory, on N cores (a subprocess pinned to cores 0..N-1,
  RAYON_NUM_THREADS=N); the faster of ``encode_batch`` and ``encode_batch_fast`` on a sample is timed
  on the whole corpus, encode calls only;
- build: ``packer build --workers N`` end to end (process start to exit) on the same cores, with
  ``--tokenizer-backend hf`` (the backend the ceiling measures);
- start-up floor: a bare process importing numpy, pyarrow and tokenizers and parsing the tokenizer
  file: what any build pays before its first token. ceiling / (ceiling + floor) is "best possible".

Printed: ceiling_time / build_time (1.0 = nothing beyond tokenizing) per round and the median, the
same ratio of CPU seconds (steadier when other jobs share the machine), and a JSON line.
``--concurrent`` runs ceiling and build at once on disjoint cores (swapped every other round), so
that both meet the same load on a machine whose speed drifts from one minute to the next.

    python bench/build_bench.py bench_out/real/real.jsonl --workers 1 2 --rounds 2
    python bench/build_bench.py bench_out/real/txt --workers 1 2      # many small files
    python bench/build_bench.py bench_out/real/real.jsonl --workers 1 --rounds 4 --concurrent
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from common import GPT2, child_env, emit_json, pin  # bench/common.py


_CEILING = r"""
import json, os, sys, time
from common import char_batches, corpus_texts
from packer.tokenize import resolve_tokenizer, Encoder
inputs, tok_path, batch_chars = sys.argv[1].split("\0"), sys.argv[2], int(sys.argv[3])
texts = corpus_texts(inputs)
tok = Encoder(resolve_tokenizer(tok_path))._tok  # the same tokenizer the build uses (truncation off)
batches = char_batches(texts, batch_chars)

def run(fn, bs):
    t, c = time.perf_counter(), time.process_time(); count = 0
    for b in bs:
        count += sum(len(e) for e in fn(b, add_special_tokens=False))
    return time.perf_counter() - t, count, time.process_time() - c

sample = [texts[i] for i in range(0, len(texts), max(1, len(texts) // 200))]
probe = {name: run(getattr(tok, name), [sample])[0] for name in ("encode_batch", "encode_batch_fast")}
best = min(probe, key=probe.get)
seconds, tokens, cpu = run(getattr(tok, best), batches)
print(json.dumps({"method": best, "probe_s": probe, "seconds": seconds, "tokens": tokens, "cpu": cpu,
                  "docs": len(texts), "chars": sum(map(len, texts))}))
"""


def ceiling(inputs: list[str], tok: str, n: int, batch_chars: int, first: int = 0) -> dict:
    env = child_env(RAYON_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="true" if n > 1 else "false")
    r = subprocess.run(pin(n, first) + [sys.executable, "-c", _CEILING, "\0".join(inputs), tok, str(batch_chars)],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


_FLOOR = r"""
import sys
import numpy, pyarrow, pyarrow.ipc, tokenizers
tokenizers.Tokenizer.from_file(sys.argv[1])
"""


def start_floor(tok: str, n: int, first: int = 0) -> float:
    """Seconds any process that tokenizes with HF and writes Arrow pays before its first token, which
    the ceiling does not time: interpreter start, importing numpy, pyarrow and tokenizers, parsing the
    tokenizer file. A build of T ceiling-seconds of text can reach at most T / (T + floor)."""
    t = time.perf_counter()
    subprocess.run(pin(n, first) + [sys.executable, "-c", _FLOOR, tok], check=True)
    return time.perf_counter() - t


def build(inputs: list[str], tok: str, n: int, extra_args: list[str], first: int = 0, cores: int | None = None) -> dict:
    """``packer build --workers n``, timed, on cores first..first+n-1 (or ``cores`` of them)."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
        out = os.path.join(d, "out")
        cmd = pin(cores or n, first) + [sys.executable, "-m", "packer.cli", "build", *inputs, out, "--tokenizer", tok,
                     "--workers", str(n), "-q", *extra_args]
        t = time.perf_counter()
        with open(os.path.join(d, "stderr"), "w+") as err:
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
            _, status, ru = os.wait4(p.pid, 0)  # this child's rusage, its reaped workers included
            p.returncode = os.waitstatus_to_exitcode(status)
            seconds = time.perf_counter() - t
            if p.returncode:
                err.seek(0)
                sys.exit(err.read())
        cpu = ru.ru_utime + ru.ru_stime
        with open(os.path.join(out, "manifest.json")) as f:
            m = json.load(f)
    return {"seconds": seconds, "cpu": cpu, "tokens": m["totals"]["tokens"], "docs": m["totals"]["documents"],
            "shards": len(m["shards"]), "cmd": " ".join(cmd[3:]), "manifest": m}


def side_by_side(inputs: list[str], tok: str, n: int, batch_chars: int, extra: list[str], rnd: int,
                 concurrent: bool) -> tuple[dict, dict]:
    """(ceiling, build) results: one after the other on cores 0..n-1, or with ``concurrent`` at the
    same time on cores 0..n-1 and n..2n-1 (swapped every other round), so both meet the same load."""
    if not concurrent:
        return ceiling(inputs, tok, n, batch_chars), build(inputs, tok, n, extra)
    c_first, b_first = (0, n) if rnd % 2 == 0 else (n, 0)
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("c", ceiling(inputs, tok, n, batch_chars, c_first)))
    th.start()
    b = build(inputs, tok, n, extra, b_first)
    th.join()
    return box["c"], b


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--tokenizer", default=GPT2)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-mb", type=float, default=8, help="text per encode call of the ceiling (MB of chars)")
    ap.add_argument("--build-args", default="", help="extra packer build arguments, e.g. '--unit-mb 16'")
    ap.add_argument("--concurrent", action="store_true",
                    help="run ceiling and build at the same time on disjoint cores (needs 2N cores): on a "
                         "shared machine both then meet the same load, which one-after-the-other does not")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    args = ap.parse_args(argv)
    tok = os.path.abspath(args.tokenizer)
    extra = args.build_args.split()
    if "--tokenizer-backend" not in extra:
        extra += ["--tokenizer-backend", "hf"]  # the backend the ceiling measures
    rows = []
    for rnd in range(args.rounds):
        for n in args.workers:
            c, b = side_by_side(args.inputs, tok, n, int(args.batch_mb * 1e6), extra, rnd, args.concurrent)
            floor = start_floor(tok, n)
            ratio = c["seconds"] / b["seconds"]
            cpu_ratio = c["cpu"] / b["cpu"]
            rows.append({"round": rnd, "workers": n, "concurrent": args.concurrent, "ceiling_s": c["seconds"], "ceiling_method": c["method"],
                         "build_s": b["seconds"], "ratio": ratio, "ceiling_cpu_s": c["cpu"], "build_cpu_s": b["cpu"],
                         "cpu_ratio": cpu_ratio, "tokens": c["tokens"], "docs": c["docs"],
                         "chars": c["chars"], "build_tokens_with_eos": b["tokens"], "shards": b["shards"],
                         "probe_s": c["probe_s"], "start_floor_s": floor,
                         "best_possible_ratio": c["seconds"] / (c["seconds"] + floor), "cmd": b["cmd"]})
            print(f"round {rnd} workers {n}: ceiling {c['seconds']:.2f}s ({c['method']}, "
                  f"{c['tokens'] / c['seconds'] / 1e6:.3f} Mtok/s), build {b['seconds']:.2f}s "
                  f"({c['tokens'] / b['seconds'] / 1e6:.3f} Mtok/s): ratio {ratio:.3f}; "
                  f"CPU s ceiling {c['cpu']:.2f} build {b['cpu']:.2f}: ratio {cpu_ratio:.3f}; start-up floor "
                  f"{floor:.2f}s (best possible ratio {c['seconds'] / (c['seconds'] + floor):.3f})", flush=True)
    print(f"\ninputs {' '.join(args.inputs)}: {rows[0]['docs']} docs, {rows[0]['tokens']:,} tokens (no EOS), "
          f"{rows[0]['chars'] / 1e6:.1f} M chars")
    print("workers  wall ratio (build tokens/s / ceiling tokens/s; target >= 0.95)  |  CPU-time ratio  |  "
          "best possible wall ratio (the ceiling plus the start-up floor)")
    summary, cpu_summary = {}, {}
    for n in args.workers:
        rs = [r["ratio"] for r in rows if r["workers"] == n]
        cs = [r["cpu_ratio"] for r in rows if r["workers"] == n]
        summary[n], cpu_summary[n] = statistics.median(rs), statistics.median(cs)
        best = statistics.median(r["best_possible_ratio"] for r in rows if r["workers"] == n)
        print(f"{n:>7}  median {summary[n]:.3f} (best {max(rs):.3f}; rounds {', '.join(f'{x:.3f}' for x in rs)})"
              f"  |  median {cpu_summary[n]:.3f}  |  median {best:.3f}")
    base = min(args.workers)
    for n in sorted(set(args.workers) - {base}):
        med = {k: [statistics.median(r[k] for r in rows if r["workers"] == m) for m in (base, n)]
               for k in ("ceiling_s", "build_s")}
        print(f"speed-up {base}->{n} workers: ceiling x{med['ceiling_s'][0] / med['ceiling_s'][1]:.2f}, "
              f"build x{med['build_s'][0] / med['build_s'][1]:.2f}")
    result = {"bench": "build_bench", "inputs": args.inputs, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "rows": rows, "median_ratio": summary, "median_cpu_ratio": cpu_summary}
    emit_json(result, args.json)


if __name__ == "__main__":
    main()
