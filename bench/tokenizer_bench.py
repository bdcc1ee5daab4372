"""Tokenizer backends: raw ceilings of HF tokenizers and tiktoken, and whole builds with each, side by side.

Everything runs on the same texts (read with ``packer.formats``: what a build tokenizes), in
subprocesses pinned to the first N cores, over ``--rounds``. The targets are ratios of runs made next
to each other (per round: the tiktoken ceiling, the auto build, the HF build), the median over rounds,
in wall time and CPU seconds; single figures are the best round.

``--raw``, per thread count N (the slow HF variants in the first ``--hf-raw-rounds`` rounds only):
``hf batch`` / ``hf fast`` (``encode_batch`` / ``encode_batch_fast``, RAYON_NUM_THREADS=N);
``tiktoken`` (``encode_ordinary_batch(num_threads=N)`` of the converted encoding); ``tiktoken procs``
(N>1: N forked processes on contiguous shares; the slowest share's time); ``packer hf`` / ``packer
tiktoken`` (N=1: ``Encoder.encode_flat``, what a build worker runs per chunk). Texts go in batches of
``--batch-mb`` MB; only encode calls are timed; every variant's ids are hashed and must agree.

``--build``, per worker count N: ``packer build --tokenizer-backend hf|auto --workers N`` end to end,
shard checksums compared between backends (they must be byte-identical). ``--timeline N``: one build
in this process, each step timed. ``--sweep``: every code point in 8 contexts, HF against tiktoken.

    python bench/tokenizer_bench.py bench_out/real/real.jsonl --raw --build --rounds 5
    python bench/tokenizer_bench.py --sweep     # (~3 min)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import GPT2, child_env, emit_json, measure, pin  # bench/common.py


_RAW = r"""
import hashlib, json, os, sys, time
import numpy as np
from common import char_batches, corpus_texts
from packer.tokenize import Encoder, choose_backend, resolve_tokenizer
from packer.tokenize import backend as T
inputs, tok_path, variant, n, batch_chars = sys.argv[1].split("\0"), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
texts = corpus_texts(inputs)
batches = char_batches(texts, batch_chars)
info = resolve_tokenizer(tok_path)
if variant in ("hf batch", "hf fast"):
    from tokenizers import Tokenizer
    hf = Tokenizer.from_str(info.json)
    f = hf.encode_batch if variant == "hf batch" else hf.encode_batch_fast
    fn = lambda b: [e.ids for e in f(b, add_special_tokens=False)]
elif variant.startswith("tiktoken"):  # "tiktoken": its thread pool; "tiktoken procs": n processes
    import tiktoken
    conv = T.convert(info.json)
    enc = tiktoken.Encoding("x", pat_str=conv.pat_str, mergeable_ranks=conv.ranks, special_tokens={})
    fn = lambda b: enc.encode_ordinary_batch(b, num_threads=n if variant == "tiktoken" else 1)
else:  # "packer hf" | "packer tiktoken": one build worker's encoder
    backend = variant.split()[1]
    e = Encoder(choose_backend(info, backend, lambda: texts[:200]))
    fn = lambda b: e.encode_flat(b)
fn(texts[:20])  # warm up (thread pools, caches)

def run(which):
    # encode batches[i] for i in which: [(i, seconds, cpu, tokens, digest of the ids)]; only encode calls timed
    res = []
    for i in which:
        t, c = time.perf_counter(), time.process_time()
        out = fn(batches[i])
        dt, dc = time.perf_counter() - t, time.process_time() - c
        if variant.startswith("packer"):  # (flat ids with EOS, lengths with EOS): drop the EOS to compare
            ids, lengths = out
            keep = np.ones(len(ids), bool); keep[np.cumsum(lengths) - 1] = False
            flat, lens = ids[keep], lengths - 1
        else:
            lens = np.fromiter(map(len, out), np.int64, len(out))
            flat = np.concatenate([np.asarray(ids, np.uint32) for ids in out]) if out else np.zeros(0, np.uint32)
        res.append((i, dt, dc, int(lens.sum()), hashlib.sha256(lens.tobytes() + flat.astype(np.uint32).tobytes()).digest()))
    return res

if variant == "tiktoken procs" and n > 1:
    # n forked processes, each a contiguous share of the batches (balanced by characters);
    # the time is the slowest share's encode time: an upper bound on what n cores can do.
    import multiprocessing as mp
    sizes = np.cumsum([sum(map(len, b)) for b in batches])
    cut = np.searchsorted(sizes, sizes[-1] * np.arange(1, n) / n)
    shares = [list(s) for s in np.split(np.arange(len(batches)), cut)]
    with mp.get_context("fork").Pool(n) as pool:
        parts = pool.map(run, shares)
    seconds = max(sum(r[1] for r in p) for p in parts)
    res = sorted(r for p in parts for r in p)
else:
    res = run(range(len(batches)))
    seconds = sum(r[1] for r in res)
cpu = sum(r[2] for r in res)
tokens = sum(r[3] for r in res)
h = hashlib.sha256(b"".join(r[4] for r in res))
print(json.dumps({"seconds": seconds, "cpu": cpu, "tokens": tokens, "docs": len(texts),
                  "chars": sum(map(len, texts)), "digest": h.hexdigest()[:16], "to_hf": getattr(getattr(locals().get("e"), "_tk", None), "to_hf", None)}))
"""

RAW_VARIANTS = [("hf batch", 1), ("hf fast", 1), ("tiktoken", 1), ("packer hf", 1), ("packer tiktoken", 1),
                ("hf batch", 2), ("hf fast", 2), ("tiktoken", 2), ("tiktoken procs", 2)]


def raw(inputs: list[str], tok: str, variant: str, n: int, batch_chars: int) -> dict:
    env = child_env(RAYON_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="true" if n > 1 else "false")
    r = subprocess.run(pin(n) + [sys.executable, "-c", _RAW, "\0".join(inputs), tok, variant, str(n), str(batch_chars)],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"{variant} x{n}: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def build(inputs: list[str], tok: str, backend: str, n: int, extra: list[str]) -> dict:
    """``packer build --workers n --tokenizer-backend backend`` on cores 0..n-1, timed (common.measure)."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
        cmd = pin(n) + [sys.executable, "-m", "packer.cli", "build", *inputs, os.path.join(d, "out"), "--tokenizer",
                        tok, "--workers", str(n), "-q", "--tokenizer-backend", backend, *extra]
        b = measure(cmd, dict(os.environ))
        with open(os.path.join(d, "out", "manifest.json")) as f:
            m = json.load(f)
    return {"seconds": b["wall"], "cpu": b["cpu"],
            "tokens": m["totals"]["tokens"] - m["totals"]["documents"],  # EOS excluded, as in the raw figures
            "docs": m["totals"]["documents"],
            "checksums": [s["xxh3_128"] if "xxh3_128" in s else s.get(m.get("checksum", ""), "") for s in m["shards"]],
            "backend": m["tokenizer"].get("backend"), "reason": m["tokenizer"].get("backend_reason"),
            "cmd": " ".join(cmd[3:])}


def sweep(tok: str) -> None:
    """Every code point (bar surrogates) in 8 contexts: HF vs tiktoken. Prints the differences."""
    from tokenizers import Tokenizer

    from packer.tokenize import backend as T
    from packer.tokenize import resolve_tokenizer

    info = resolve_tokenizer(tok)
    conv = T.convert(info.json)
    enc, hf = T.TiktokenEncoder(info.json, conv), Tokenizer.from_str(info.json)
    ctx = ["{c}", "a{c}b", " {c} ", "1{c}2", "{c}{c}", "'{c}", "{c}\n x", "  {c}"]
    bad, t0, n = [], time.perf_counter(), 0
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(cps), 512):
        # one text per context and block of 512 code points, each code point between separators
        texts = ["\x00".join(f.format(c=chr(c)) for c in cps[i : i + 512]) for f in ctx]
        r = T.check(enc, hf, texts, f"block U+{cps[i]:04X}")
        n += r.tokens
        if not r.ok:
            bad.append(r.difference)
    print(f"sweep: {len(cps):,} code points x {len(ctx)} contexts, {n:,} tokens, {time.perf_counter() - t0:.0f}s: "
          f"{len(bad)} block(s) differ")
    for b in bad[:20]:
        print("  " + b)


def timeline(inputs: list[str], tok: str, n: int) -> None:
    """One build with ``n`` workers, in this process, each step timed (BuildResult.phases): where a
    many-core build's wall time goes, the serial steps before and after the workers included."""
    import shutil
    import tempfile

    from packer import build as packer_build

    out = tempfile.mkdtemp(prefix="timeline-")
    try:
        t0 = time.perf_counter()
        r = packer_build(inputs, os.path.join(out, "o"), tokenizer=tok, workers=n, quiet=True)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    tokens = r.manifest["totals"]["tokens"]
    print(f"timeline: {n} workers, {tokens:,} tokens in {wall:.2f}s ({tokens / wall / 1e6:.2f} Mtok/s), "
          f"engine {r.manifest['tokenizer']['backend']}")
    for k, v in r.phases.items():
        print(f"  {k:<18}{v:7.2f}s  {100 * v / wall:5.1f}%")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*")
    ap.add_argument("--tokenizer", default=GPT2)
    ap.add_argument("--raw", action="store_true", help="time the raw tokenizers")
    ap.add_argument("--build", action="store_true", help="time whole builds with each backend")
    ap.add_argument("--sweep", action="store_true", help="compare HF and tiktoken on every code point")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hf-raw-rounds", type=int, default=1, help="rounds that also time the (slow) raw HF variants")
    ap.add_argument("--batch-mb", type=float, default=1, help="text per encode call (MB of chars; a build chunk is ~1 MB)")
    ap.add_argument("--build-args", default="", help="extra packer build arguments, e.g. '--unit-mb 16'")
    ap.add_argument("--timeline", type=int, default=0, metavar="N",
                    help="also run one build with N workers in this process and print the time of each step")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    return ap


class _Runs:
    """Every timed run: raw (variant, n) -> results, builds (backend, n) -> results, and the per-round ratios."""

    def __init__(self, args, tok: str):
        self.args, self.tok = args, tok
        self.raws: dict = {}
        self.builds: dict = {}
        self.ratios: list = []  # per round and n: the two targets, from runs next to each other in time

    def raw(self, rnd: int, v: str, n: int) -> dict:
        r = raw(self.args.inputs, self.tok, v, n, int(self.args.batch_mb * 1e6))
        r["round"] = rnd
        self.raws.setdefault((v, n), []).append(r)
        print(f"round {rnd} raw {v:<16} x{n}: {r['tokens'] / r['seconds'] / 1e6:6.3f} Mtok/s "
              f"({r['seconds']:.2f}s, cpu {r['cpu']:.2f}s) ids {r['digest']}", flush=True)
        return r

    def build(self, rnd: int, backend: str, n: int) -> dict:
        b = build(self.args.inputs, self.tok, backend, n, self.args.build_args.split())
        self.builds.setdefault((backend, n), []).append(b)
        print(f"round {rnd} build {backend:<4} x{n}: {b['tokens'] / b['seconds'] / 1e6:6.3f} Mtok/s "
              f"({b['seconds']:.2f}s, cpu {b['cpu']:.2f}s) ran {b['backend']}", flush=True)
        return b

    def round(self, rnd: int) -> None:
        """Per worker count, side by side: the tiktoken ceiling(s), the auto build, the HF build."""
        args = self.args
        for n in args.workers:
            ceil = [self.raw(rnd, v, m) for v, m in RAW_VARIANTS if m == n and v.startswith("tiktoken")] if args.raw else []
            if not args.build:
                continue
            a, h = self.build(rnd, "auto", n), self.build(rnd, "hf", n)
            row = {"round": rnd, "workers": n, "auto_vs_hf": h["seconds"] / a["seconds"], "auto_vs_hf_cpu": h["cpu"] / a["cpu"]}
            if ceil:
                c = min(ceil, key=lambda r: r["seconds"])  # the higher ceiling
                row["auto_vs_raw_tiktoken"] = c["seconds"] / a["seconds"] * a["tokens"] / c["tokens"]
                row["auto_vs_raw_tiktoken_cpu"] = c["cpu"] / a["cpu"] * a["tokens"] / c["tokens"]
            self.ratios.append(row)
        if args.raw and rnd < args.hf_raw_rounds:
            for v, n in RAW_VARIANTS:
                if n in args.workers and not v.startswith("tiktoken"):
                    self.raw(rnd, v, n)


def _best(rs):  # the least disturbed round
    return min(rs, key=lambda r: r["seconds"])


def _report_raw(runs: _Runs, result: dict) -> None:
    raws = runs.raws
    first = _best(next(iter(raws.values())))
    print(f"inputs {' '.join(runs.args.inputs)}: {first['docs']} docs, {first['tokens']:,} tokens, {first['chars'] / 1e6:.1f} M chars")
    digests = {r["digest"] for rs in raws.values() for r in rs}
    print(f"ids identical across all raw variants: {len(digests) == 1} ({', '.join(sorted(digests))})")
    print("raw ceilings, best round (wall), and tokens per CPU-second:")
    for n in runs.args.workers:
        ref = _best(raws[("hf fast", n)]) if ("hf fast", n) in raws else None
        for (v, m), rs in raws.items():
            if m != n:
                continue
            r = _best(rs)
            tps = r["tokens"] / r["seconds"]
            rel = ref["seconds"] / r["seconds"] if ref else float("nan")
            crel = ref["cpu"] / r["cpu"] if ref else float("nan")
            print(f"  raw {v:<16} x{n}: {tps / 1e6:6.3f} Mtok/s  = {rel:5.2f}x hf fast x{n}  "
                  f"| per CPU s: {r['tokens'] / r['cpu'] / 1e6:6.3f} Mtok = {crel:5.2f}x hf fast")
            result["raw"][f"{v} x{n}"] = {"mtok_s": tps / 1e6, "vs_hf_fast": rel, "cpu_s": r["cpu"],
                                          "mtok_per_cpu_s": r["tokens"] / r["cpu"] / 1e6, "digest": r["digest"]}


def _report_builds(runs: _Runs, result: dict) -> None:
    sums = {tuple(b["checksums"]) for bs in runs.builds.values() for b in bs}
    print(f"shards identical across backends, worker counts and rounds: {len(sums) == 1}")
    print("builds, best round:")
    for n in runs.args.workers:
        for backend in ("hf", "auto"):
            b = _best(runs.builds[(backend, n)])
            print(f"  build {backend:<4} x{n} (ran {b['backend']}): {b['tokens'] / b['seconds'] / 1e6:6.3f} Mtok/s "
                  f"({b['seconds']:.2f}s, {b['tokens'] / b['cpu'] / 1e6:.3f} Mtok per CPU s)")
            result["build"][f"{backend} x{n}"] = {"mtok_s": b["tokens"] / b["seconds"] / 1e6, "seconds": b["seconds"],
                                                  "cpu_s": b["cpu"], "ran": b["backend"], "reason": b["reason"], "cmd": b["cmd"]}
    if 1 in runs.args.workers:
        print("scaling over 1 worker, best rounds (Mtok/s at N / (N x Mtok/s at 1); target >= 0.80 at 16):")
        for backend in ("auto", "hf"):
            one = _best(runs.builds[(backend, 1)])
            for n in runs.args.workers:
                b = _best(runs.builds[(backend, n)])
                eff = (b["tokens"] / b["seconds"]) / (n * one["tokens"] / one["seconds"])
                print(f"  {backend:<4} x{n}: {one['seconds'] / b['seconds']:5.2f}x faster = {eff:.2f} of linear")
                result["build"][f"{backend} x{n} of linear"] = eff
    print("targets, per round from runs side by side: median [min-max] over rounds")
    keys = [("auto_vs_raw_tiktoken", "auto build / raw tiktoken ceiling (target >= 0.9)"),
            ("auto_vs_hf", "auto build / HF build (target >= 3: issue 21)")]
    for n in runs.args.workers:
        rows = [r for r in runs.ratios if r["workers"] == n]
        for k, label in keys:
            wall = [r[k] for r in rows if k in r]
            cpu = [r[k + "_cpu"] for r in rows if k + "_cpu" in r]
            if wall:
                print(f"  x{n} {label}: wall {statistics.median(wall):.2f} [{min(wall):.2f}-{max(wall):.2f}]"
                      f"  | CPU s {statistics.median(cpu):.2f} [{min(cpu):.2f}-{max(cpu):.2f}]")
                result["build"][f"x{n} {k}"] = {"median": statistics.median(wall), "min": min(wall), "max": max(wall),
                                                "cpu_median": statistics.median(cpu)}


def main(argv=None) -> None:
    ap = _parser()
    args = ap.parse_args(argv)
    tok = os.path.abspath(args.tokenizer)
    if args.sweep:
        sweep(tok)
    if args.timeline:
        timeline(args.inputs, tok, args.timeline)
    if not (args.raw or args.build):
        return
    if not args.inputs:
        ap.error("give the inputs to tokenize")
    runs = _Runs(args, tok)
    for rnd in range(args.rounds):
        runs.round(rnd)
    print()
    result = {"bench": "tokenizer_bench", "inputs": args.inputs, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "raw": {}, "build": {}, "ratios": runs.ratios}
    if runs.raws:
        _report_raw(runs, result)
    if runs.builds:
        _report_builds(runs, result)
    emit_json(result, args.json)


if __name__ == "__main__":
    main()
