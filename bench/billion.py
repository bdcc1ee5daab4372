"""A billion-token build on one machine: tokens/s against the host's encode-only ceiling, peak memory
of the whole process tree, and kill -9 half way then --resume, byte-identical to an uninterrupted build.

    python bench/billion.py SOURCE.jsonl[.zst] --tokenizer gpt2.json --tokens 1e9 --workers 16 --work /tmp/bb

Input: SOURCE's documents written again in seeded orders (~128 MB .jsonl files) up to ``--tokens``. Ceilings:
``--workers`` pinned processes encoding the same texts from memory (encode_scaling.py's weak scaling), and the
same parsing them from JSON lines first (its ``jsonl``: what any build of JSON must also do). The build is sampled
every 0.5 s (tokens in unit records, PSS of the process tree); steady state is 20% to 80% of the tokens. Then the
same build is SIGKILLed at half its units and resumed: units redone, every file against the first build's.

``--workers 16 8``: each count in turn on one input (kill and resume at the first only), then their speed-up.
An input already in ``--work`` for the same source and ``--tokens`` is used again (two trees, one input).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.environ.get("PACKER_TREE") or os.path.dirname(HERE))  # the packer measured (the build: the cwd's)

import encode_scaling as ES  # noqa: E402
from common import corpus_texts, emit_json, pss_mb  # noqa: E402


def make_input(texts: list[str], target_bytes: int, folder: str, file_bytes: int = 128 << 20) -> int:
    """Copies of ``texts`` in seeded orders as .jsonl files in ``folder`` until ``target_bytes``."""
    os.makedirs(folder, exist_ok=True)
    lines = [json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts]
    written, k, f, in_file = 0, 0, None, 0
    while written < target_bytes:
        order = list(range(len(lines)))
        random.Random(k).shuffle(order)
        for i in order:
            if f is None or in_file >= file_bytes:
                f and f.close()
                f, in_file = open(os.path.join(folder, f"part-{len(os.listdir(folder)):05d}.jsonl"), "w"), 0
            n = f.write(lines[i])
            written += n
            in_file += n
            if written >= target_bytes:
                break
        k += 1
    f.close()
    return written


def run_build(args, workers, inp, out, extra=(), kill_at=None) -> dict:
    """One `packer build` at ``workers``, sampled; ``kill_at``: SIGKILL its group once that many unit records exist."""
    cmd = [sys.executable, "-m", "packer.cli", "build", inp, out, "--seq-len", str(args.seq_len), "--tokenizer",
           args.tokenizer, "--workers", str(workers), "-q", "--summary-json", out + ".summary.json", *extra]
    c0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    p = subprocess.Popen(cmd, start_new_session=True)
    seen, samples, peak = {}, [], 0.0
    while p.poll() is None:
        time.sleep(0.1)  # a look at the unit records (every 0.5 s gave a 3.7 s build few samples)
        peak = max(peak, pss_mb(p.pid))
        for r in glob.glob(os.path.join(out, "units", "*.json")):
            if r not in seen:
                try:
                    seen[r] = json.load(open(r))["tokens"]
                except (OSError, ValueError):
                    continue
        samples.append((time.monotonic() - t0, sum(seen.values())))
        if kill_at is not None and len(seen) >= kill_at:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return {"killed_after_units": len(seen), "wall": time.monotonic() - t0}
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.load(open(out + ".summary.json")) if os.path.exists(out + ".summary.json") else {}
    return {"rc": p.returncode, "wall": time.monotonic() - t0, "cpu": (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime),
            "peak_pss_mb": peak, "samples": samples, "summary": summary}


def steady(samples, total: int) -> float:
    """Tokens/s between 20% and 80% of ``total`` tokens written."""
    a, b = (next((s for s in samples if s[1] >= f * total), None) for f in (0.2, 0.8))
    return (b[1] - a[1]) / (b[0] - a[0]) if a and b and b[0] > a[0] else float("nan")


def files(out: str) -> dict[str, str]:
    """Every file under ``out`` (relative path) -> its xxh3-128."""
    from packer.shards import file_checksum

    return {os.path.relpath(os.path.join(top, n), out): file_checksum(os.path.join(top, n))
            for top, _, names in os.walk(out) for n in names}


def ceiling(args, workers, texts, mode: str = "shared") -> float:
    """Tokens/s of ``workers`` pinned processes encoding the same texts from memory at once (best of 2); "jsonl": parsed first."""
    ES.prepare(args.tokenizer, texts, args.ceiling_mb, workers, backend="auto")
    return max(workers * r["tokens"] / r["wall_max"] for r in (ES.run(mode, workers) for _ in range(2)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--tokens", type=float, default=1e9)
    ap.add_argument("--workers", type=int, nargs="+", default=[16])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--ceiling-mb", type=float, default=20)
    ap.add_argument("--work", default="/tmp/billion")
    ap.add_argument("--no-kill", action="store_true", help="skip the kill -9 and --resume")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    texts = corpus_texts([args.source])
    from packer.tokenize import Encoder, choose_backend, resolve_tokenizer

    sample = texts[:2000]
    enc = Encoder(choose_backend(resolve_tokenizer(args.tokenizer), "auto", lambda: sample[:200]))
    bpt = sum(len(t.encode()) for t in sample) / len(enc.encode_flat(sample)[0])
    inp, made, key, t = (os.path.join(args.work, "in"), os.path.join(args.work, "in.json"),
                         [os.path.abspath(args.source), args.tokens], time.monotonic())
    size = json.load(open(made))["size"] if os.path.exists(made) and json.load(open(made))["key"] == key else None
    if size is None:
        subprocess.run(["rm", "-rf", inp, made], check=True)
        json.dump({"key": key, "size": (size := make_input(texts, int(args.tokens * bpt * 1.02), inp))}, open(made, "w"))
    print(f"input: {size / 1e9:.2f} GB in {len(os.listdir(inp))} files ({bpt:.2f} B/token), {time.monotonic() - t:.0f} s")
    got = [one_count(args, w, texts, inp, kill=n == 0 and not args.no_kill) for n, w in enumerate(args.workers)]
    if len(got) > 1:
        print(f"{args.workers[1]} -> {args.workers[0]} workers: whole build {got[1][0] / got[0][0]:.2f}x, steady state "
              f"{got[0][1] / got[1][1]:.2f}x", flush=True)


def one_count(args, workers, texts, inp, kill: bool) -> tuple[float, float]:
    """The ceiling and the build at ``workers`` (and the kill -9 and resume if ``kill``): (wall s, steady tok/s)."""
    subprocess.run(["rm", "-rf", os.path.join(args.work, "full"), os.path.join(args.work, "killed")], check=True)
    ceil, parsed = ceiling(args, workers, texts), ceiling(args, workers, texts, "jsonl")
    print(f"ceiling: {ceil / 1e6:.1f} M tok/s ({workers} processes, encode only); parse + encode {parsed / 1e6:.1f} M tok/s "
          f"= {parsed / ceil:.3f} of it", flush=True)
    full = run_build(args, workers, inp, os.path.join(args.work, "full"))
    totals = full["summary"].get("totals", {})
    tokens, rate = totals.get("tokens", 0), steady(full["samples"], totals.get("tokens", 0))
    units = len(glob.glob(os.path.join(args.work, "full", "units", "*.json")))
    print(f"build x{workers}: rc {full['rc']}, {tokens / 1e9:.3f} B tokens, {units} units, wall {full['wall']:.1f} s, CPU "
          f"{full['cpu']:.0f} s, peak PSS {full['peak_pss_mb']:.0f} MiB; steady {rate / 1e6:.1f} M tok/s = {rate / ceil:.3f} of the "
          f"ceiling, {rate / parsed:.3f} of parse + encode; whole build {tokens / full['wall'] / 1e6:.1f} M tok/s", flush=True)
    killed, redone, same = {}, None, None
    if kill:
        killed = run_build(args, workers, inp, os.path.join(args.work, "killed"), kill_at=units // 2)
        resumed = run_build(args, workers, inp, os.path.join(args.work, "killed"), extra=("--resume",))
        redone = resumed["summary"].get("units_run", -1) - (units - killed["killed_after_units"])
        same = files(os.path.join(args.work, "full")) == files(os.path.join(args.work, "killed"))
        print(f"kill -9 after {killed['killed_after_units']} of {units} units ({killed['wall']:.1f} s), resume: rc {resumed['rc']}, "
              f"{resumed['summary'].get('units_run')} units run ({redone} redone; at most {workers} allowed), "
              f"wall {resumed['wall']:.1f} s, peak PSS {resumed['peak_pss_mb']:.0f} MiB; byte-identical: {same}", flush=True)
    emit_json({"bench": "billion", "tokenizer": args.tokenizer, "workers": workers, "tokens": tokens,
               "ceiling_tok_s": ceil, "parse_encode_tok_s": parsed, "steady_tok_s": rate, "of_ceiling": rate / ceil, "units": units,
               **{k: full[k] for k in ("wall", "cpu", "peak_pss_mb")}, "timeline": full["samples"][::20],
               "killed_after": killed.get("killed_after_units"), "redone": redone, "identical": same}, args.json)
    return full["wall"], rate


if __name__ == "__main__":
    main()
