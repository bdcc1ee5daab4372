"""Tokenizer backends in whole builds, side by side: auto against HF.

Everything runs on the same texts, in subprocesses pinned to the first N cores, over ``--rounds``. The
targets are ratios of runs made next to each other (per round: the auto build, the HF build), the median
over rounds, in wall time and CPU seconds; single figures are the best round. (The encoders alone, each
family and engine: bench/encoders.py --encode, which replaced this script's ``--raw`` after 0e3aa2c.)

``--build``, per worker count N: ``packer build --tokenizer-backend hf|auto --workers N`` end to end,
shard checksums compared between backends (they must be byte-identical). ``--timeline N``: one build
in this process, each step timed. ``--sweep``: every code point in 8 contexts, HF against tiktoken.

    python bench/tokenizer_bench.py bench_out/real/real.jsonl --build --rounds 5
    python bench/tokenizer_bench.py --sweep     # (~3 min)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from common import GPT2, emit_json, measure, pin  # bench/common.py


def build(inputs: list[str], tok: str, backend: str, n: int, extra: list[str]) -> dict:
    """``packer build --workers n --tokenizer-backend backend`` on cores 0..n-1, timed (common.measure)."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
        cmd = pin(n) + [sys.executable, "-m", "packer.cli", "build", *inputs, os.path.join(d, "out"), "--tokenizer",
                        tok, "--workers", str(n), "-q", "--tokenizer-backend", backend, *extra]
        b = measure(cmd, dict(os.environ))
        with open(os.path.join(d, "out", "manifest.json")) as f:
            m = json.load(f)
    return {"seconds": b["wall"], "cpu": b["cpu"],
            "tokens": m["totals"]["tokens"] - m["totals"]["documents"],  # EOS excluded
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
    ap.add_argument("--build", action="store_true", help="time whole builds with each backend")
    ap.add_argument("--sweep", action="store_true", help="compare HF and tiktoken on every code point")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build-args", default="", help="extra packer build arguments, e.g. '--unit-mb 16'")
    ap.add_argument("--timeline", type=int, default=0, metavar="N",
                    help="also run one build with N workers in this process and print the time of each step")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    return ap


class _Runs:
    """Every timed run: builds (backend, n) -> results, and the per-round ratios."""

    def __init__(self, args, tok: str):
        self.args, self.tok = args, tok
        self.builds: dict = {}
        self.ratios: list = []  # per round and n: the two targets, from runs next to each other in time

    def build(self, rnd: int, backend: str, n: int) -> dict:
        b = build(self.args.inputs, self.tok, backend, n, self.args.build_args.split())
        self.builds.setdefault((backend, n), []).append(b)
        print(f"round {rnd} build {backend:<4} x{n}: {b['tokens'] / b['seconds'] / 1e6:6.3f} Mtok/s "
              f"({b['seconds']:.2f}s, cpu {b['cpu']:.2f}s) ran {b['backend']}", flush=True)
        return b

    def round(self, rnd: int) -> None:
        """Per worker count, side by side: the auto build, the HF build."""
        args = self.args
        for n in args.workers:
            a, h = self.build(rnd, "auto", n), self.build(rnd, "hf", n)
            row = {"round": rnd, "workers": n, "auto_vs_hf": h["seconds"] / a["seconds"], "auto_vs_hf_cpu": h["cpu"] / a["cpu"]}
            self.ratios.append(row)


def _best(rs):  # the least disturbed round
    return min(rs, key=lambda r: r["seconds"])


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
    keys = [("auto_vs_hf", "auto build / HF build (target >= 3: issue 21)")]
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
    if not args.build:
        return
    if not args.inputs:
        ap.error("give the inputs to tokenize")
    runs = _Runs(args, tok)
    for rnd in range(args.rounds):
        runs.round(rnd)
    print()
    result = {"bench": "tokenizer_bench", "inputs": args.inputs, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "build": {}, "ratios": runs.ratios}
    if runs.builds:
        _report_builds(runs, result)
    emit_json(result, args.json)


if __name__ == "__main__":
    main()
