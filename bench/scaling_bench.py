"""How `packer build` scales with workers: tokens/s for 1, 2, 4, 8, 16 workers.

Self-contained for a fresh many-core host that has only this repository and
packer's dependencies (no network needed):

1. makes a corpus of real text from the host (``bench/real_corpus.py``:
   Python standard-library sources, man pages, /usr/share/doc, headers),
   repeated if the host has less text than asked;
2. takes a tokenizer: ``--tokenizer PATH``, else ../shared/data/gpt2-tokenizer.json
   if present, else trains a GPT-2-shaped byte-level BPE (50,257 ids, GPT-2
   pre-tokenizer) on the corpus with ``tokenizers``, so the per-token cost is
   that of a real BPE;
3. weak scaling: N workers build N copies of the base corpus (32 MB, hard links),
   so every run does the same work per core and lasts about as long; each
   run is pinned to cores 0..N-1 (taskset), with the HF tokenizers engine;
4. optionally (``--ceiling``, on by default) times HF tokenizers' own
   ``encode_batch_fast`` on the same texts with N threads, for reference.

5. optionally (``--independent``) times N one-worker builds of one copy each,
   all at once on N cores: linear scaling as the host itself delivers it
   (a lone busy core runs at a higher turbo clock than sixteen do, and has
   the L3 cache to itself). The N-worker build over that is packer's own
   scaling efficiency, with the host's effects taken out.

Prints a table (tokens/s, speed-up over 1 worker, efficiency = speed-up / N;
the target is efficiency >= 0.80 at 16, and with ``--independent`` also the
efficiency against the independent builds) and a JSON line, also written to
$OUT/scaling.json when OUT is set.

    python bench/scaling_bench.py                        # 1 2 4 8 16 workers
    python bench/scaling_bench.py --workers 1 2 --mb-per-worker 4   # a quick check on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from common import GPT2, HERE, REPO, child_env, hf_engine_args, pin  # bench/common.py



def make_base(work: str, mb: float) -> str:
    """work/base.jsonl: about ``mb`` MB of real text, one document per line."""
    base = os.path.join(work, "base.jsonl")
    if os.path.exists(base) and os.path.getsize(base) >= mb * 1e6 * 0.95:
        return base
    raw = os.path.join(work, "collected")
    subprocess.run([sys.executable, os.path.join(HERE, "real_corpus.py"), raw, "--mb", str(mb), "--no-txt"], check=True)
    with open(os.path.join(raw, "real.jsonl"), "rb") as f:
        lines = f.readlines()
    if not lines:
        sys.exit("real_corpus.py found no text on this host")
    have = sum(map(len, lines))
    with open(base, "wb") as g:
        written, i = 0, 0
        while written < mb * 1e6:  # repeat the host's text if it has less than asked
            g.write(lines[i % len(lines)])
            written += len(lines[i % len(lines)])
            i += 1
    if have < mb * 1e6:
        print(f"note: this host has {have / 1e6:.1f} MB of text; repeated to {written / 1e6:.1f} MB", file=sys.stderr)
    return base


def train_bpe(base: str, path: str, sample_mb: float = 8) -> str:
    """A GPT-2-shaped byte-level BPE trained on the corpus (when no tokenizer file is at hand)."""
    if os.path.exists(path):
        return path
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts, n = [], 0
    with open(base, "rb") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            n += len(line)
            if n >= sample_mb * 1e6:
                break
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=50257, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t = time.perf_counter()
    tok.train_from_iterator(texts, trainer)
    tok.save(path)
    print(f"trained a byte-level BPE ({tok.get_vocab_size()} ids) in {time.perf_counter() - t:.0f}s -> {path}",
          file=sys.stderr)
    return path


_CEILING = r"""
import json, sys, time
from common import char_batches
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1]); tok.no_truncation(); tok.no_padding()
texts = [json.loads(l)["text"] for l in open(sys.argv[2], "rb")] * int(sys.argv[3])
batches = char_batches(texts, 8_000_000)
t0 = time.perf_counter(); count = 0
for b in batches:
    count += sum(len(e) for e in tok.encode_batch_fast(b, add_special_tokens=False))
print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": count}))
"""


def independent(folder: str, tok: str, n: int, extra: list[str], work: str) -> dict:
    """Linear scaling as this host delivers it: n one-worker builds of one copy each, at the same time,
    each pinned to its own core. Same clocks, caches and memory bandwidth as the n-worker build meets,
    and no coordination at all: the n-worker build's tokens/s over this is its scaling efficiency with the
    host's own effects (turbo clocks fall as cores wake, shared L3) taken out."""
    cores = sorted(os.sched_getaffinity(0))[:n]
    procs, outs = [], []
    t = time.perf_counter()
    for i, core in enumerate(cores):
        out = os.path.join(work, f"ind{i:03d}")
        shutil.rmtree(out, ignore_errors=True)
        outs.append(out)
        cmd = ["taskset", "-c", str(core), sys.executable, "-m", "packer.cli", "build",
               os.path.join(folder, f"copy{i:03d}.jsonl"), out, "--tokenizer", tok, "--workers", "1", "-q", *extra]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for p in procs:
        if p.wait():
            sys.exit(p.stderr.read().decode())
    seconds = time.perf_counter() - t
    tokens = 0
    for out in outs:
        with open(os.path.join(out, "manifest.json")) as f:
            tokens += json.load(f)["totals"]["tokens"]
        shutil.rmtree(out)
    return {"independent_seconds": seconds, "independent_tokens_per_s": tokens / seconds}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--mb-per-worker", type=float, default=32,
                    help="base corpus size; N workers build N copies (32 MB: ~15-30 s per run, so the fixed ~1 s start is small)")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--train-bpe", action="store_true", help="train the BPE even if the GPT-2 file is at hand")
    ap.add_argument("--no-ceiling", dest="ceiling", action="store_false")
    ap.add_argument("--independent", action="store_true",
                    help="also time N one-worker builds at once on N cores: linear scaling as this host gives it")
    ap.add_argument("--work", default=os.path.join(REPO, "bench_out", "scaling"))
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    base = make_base(args.work, args.mb_per_worker)
    if args.tokenizer:
        tok = args.tokenizer
    elif os.path.exists(GPT2) and not args.train_bpe:
        tok = GPT2
    else:
        tok = train_bpe(base, os.path.join(args.work, "bpe.json"))
    tok = os.path.abspath(tok)
    extra = hf_engine_args()
    rows = []
    for n in args.workers:
        folder = os.path.join(args.work, f"in{n}")
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        for i in range(n):
            os.link(base, os.path.join(folder, f"copy{i:03d}.jsonl"))
        out = os.path.join(args.work, f"out{n}")
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "packer.cli", "build", folder, out, "--tokenizer", tok, "--workers", str(n),
               "-q", *extra]
        t = time.perf_counter()
        r = subprocess.run(pin(n) + cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t
        if r.returncode:
            sys.exit(r.stderr)
        with open(os.path.join(out, "manifest.json")) as f:
            m = json.load(f)
        shutil.rmtree(out)
        row = {"workers": n, "seconds": seconds, "tokens": m["totals"]["tokens"],
               "input_bytes": m["totals"]["input_bytes"], "shards": len(m["shards"]), "cmd": " ".join(cmd[1:])}
        row["tokens_per_s"] = row["tokens"] / seconds
        if args.ceiling:
            c = subprocess.run(pin(n) + [sys.executable, "-c", _CEILING, tok, base, str(n)], capture_output=True,
                               text=True, env=child_env(RAYON_NUM_THREADS=str(n)))
            if c.returncode:
                sys.exit(c.stderr)
            cj = json.loads(c.stdout.strip().splitlines()[-1])
            row["ceiling_tokens_per_s"] = cj["tokens"] / cj["seconds"]
            row["ratio_to_ceiling"] = (row["tokens"] - m["totals"]["documents"]) / seconds / row["ceiling_tokens_per_s"]
        if args.independent and n > 1:
            row.update(independent(folder, tok, n, extra, args.work))
            row["ratio_to_independent"] = row["tokens_per_s"] / row["independent_tokens_per_s"]
        shutil.rmtree(folder)
        rows.append(row)
        print(f"workers {n:2d}: {row['tokens'] / 1e6:7.1f} M tokens in {seconds:6.1f}s = "
              f"{row['tokens_per_s'] / 1e6:6.2f} M tokens/s"
              + (f"  (HF ceiling on {n} cores {row['ceiling_tokens_per_s'] / 1e6:6.2f} M/s, ratio "
                 f"{row['ratio_to_ceiling']:.3f})" if args.ceiling else "")
              + (f"  ({n} independent 1-worker builds at once: {row['independent_tokens_per_s'] / 1e6:6.2f} M/s, "
                 f"ratio {row['ratio_to_independent']:.3f})" if "ratio_to_independent" in row else ""), flush=True)
    one = next((r for r in rows if r["workers"] == 1), rows[0])
    print("\nworkers  tokens/s (M)  speed-up  efficiency (target >= 0.80 at 16)  efficiency vs N independent builds")
    for r in rows:
        r["speedup"] = r["tokens_per_s"] / one["tokens_per_s"] * one["workers"]
        r["efficiency"] = r["speedup"] / r["workers"]
        print(f"{r['workers']:7d}  {r['tokens_per_s'] / 1e6:12.2f}  {r['speedup']:8.2f}  {r['efficiency']:10.3f}"
              + (f"  {r['ratio_to_independent']:35.3f}" if "ratio_to_independent" in r else ""))
    result = {"bench": "scaling_bench", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
              "tokenizer": tok, "mb_per_worker": args.mb_per_worker, "rows": rows}
    line = json.dumps(result)
    print(line)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "scaling.json"), "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
