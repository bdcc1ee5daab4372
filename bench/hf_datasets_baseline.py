"""`packer build` against the path most people use today, on the same files and cores.

The baseline is the classic Hugging Face recipe (transformers' run_clm.py):
``datasets.load_dataset("json")``, ``map(tokenize, batched=True,
num_proc=N)``, then ``map(group_texts, batched=True, num_proc=N)``
concatenating everything and cutting blocks of ``--seq-len`` (with the
``labels`` copy run_clm makes). It tokenizes with the same GPT-2 tokenizer
through ``tokenizers`` directly (lighter than transformers' wrapper, so the
baseline is if anything flattered), EOS appended per document as packer
does. Its Arrow cache goes to a fresh folder each run, so nothing is reused.

Both run as subprocesses pinned to cores 0..N-1, end to end (process start
to exit), alternating; packer twice where it has a choice of engine: with
``--tokenizer-backend hf`` (the baseline's engine: the fair comparison) and
with its default (``auto``: tiktoken where it gives HF's ids exactly). Needs ``datasets`` (a benchmark-only dependency;
packer does not use it). Keep it in a venv of its own: installed next to
packer it brings pandas, which pyarrow then imports on first use.

    python -m venv bench_out/hfvenv && bench_out/hfvenv/bin/pip install datasets tokenizers
    python bench/hf_datasets_baseline.py bench_out/real/real.jsonl --workers 1 2 \
        --hf-python bench_out/hfvenv/bin/python

The baseline cannot read sample_data/corpus.jsonl (its malformed records
stop ``load_dataset``); packer skips and counts them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from common import GPT2, emit_json, hf_engine_args, pin  # bench/common.py


_BASELINE = r"""
import os, sys, time
from itertools import chain
from datasets import load_dataset, disable_progress_bars
from tokenizers import Tokenizer

disable_progress_bars()
files, tok_path, block_size, num_proc, cache = sys.argv[1].split("\0"), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
tok = Tokenizer.from_file(tok_path)
tok.no_truncation()
eos = tok.token_to_id("<|endoftext|>")

def tokenize(examples):
    ids = [e.ids + [eos] for e in tok.encode_batch(examples["text"], add_special_tokens=False)]
    return {"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]}

def group_texts(examples):  # as in transformers' examples/pytorch/language-modeling/run_clm.py
    concatenated = {k: list(chain(*examples[k])) for k in examples.keys()}
    total_length = len(concatenated[list(examples.keys())[0]])
    total_length = (total_length // block_size) * block_size
    result = {k: [t[i : i + block_size] for i in range(0, total_length, block_size)] for k, t in concatenated.items()}
    result["labels"] = result["input_ids"].copy()
    return result

raw = load_dataset("json", data_files=files, split="train", cache_dir=cache)
cols = raw.column_names
nproc = num_proc if num_proc > 1 else None
tokenized = raw.map(tokenize, batched=True, num_proc=nproc, remove_columns=cols)
lm = tokenized.map(group_texts, batched=True, num_proc=nproc)
print(len(lm), sum(len(x) for x in tokenized["input_ids"]))
"""


def _timed(cmd, env=None) -> tuple[float, float, str]:
    t, ru = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t
    ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return dt, (ru2.ru_utime - ru.ru_utime) + (ru2.ru_stime - ru.ru_stime), r.stdout


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help=".jsonl files")
    ap.add_argument("--tokenizer", default=GPT2)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--hf-python", default=sys.executable, help="python that has datasets installed")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    args = ap.parse_args(argv)
    tok = os.path.abspath(args.tokenizer)
    # The same engine as the baseline (hf), and what packer picks by itself (tiktoken where exact).
    engines = ["hf", "default"] if hf_engine_args() else ["default"]
    rows = []
    for rnd in range(args.rounds):
        for n in args.workers:
            with tempfile.TemporaryDirectory() as d:
                hf_s, hf_cpu, out = _timed(pin(n) + [args.hf_python, "-c", _BASELINE, "\0".join(args.inputs), tok,
                                                      str(args.seq_len), str(n), os.path.join(d, "cache")])
                blocks, hf_tokens = map(int, out.split()[-2:])
                row = {"round": rnd, "workers": n, "hf_s": hf_s, "hf_cpu_s": hf_cpu, "hf_tokens": hf_tokens,
                       "hf_blocks": blocks}
                for engine in engines:
                    out = os.path.join(d, f"out-{engine}")
                    cmd = [sys.executable, "-m", "packer.cli", "build", *args.inputs, out, "--tokenizer", tok,
                           "--seq-len", str(args.seq_len), "--workers", str(n), "-q"]
                    if engine != "default":
                        cmd += ["--tokenizer-backend", engine]
                    pk_s, pk_cpu, _ = _timed(pin(n) + cmd)
                    with open(os.path.join(out, "manifest.json")) as f:
                        m = json.load(f)
                    used = m["tokenizer"].get("backend", "hf")
                    row[engine] = {"packer_s": pk_s, "packer_cpu_s": pk_cpu, "speedup": hf_s / pk_s,
                                   "cpu_speedup": hf_cpu / pk_cpu, "engine": used,
                                   "packer_tokens": m["totals"]["tokens"], "packer_cmd": " ".join(cmd[2:])}
                    print(f"round {rnd} workers {n}: datasets+group_texts {hf_s:.2f}s ({hf_cpu:.1f} CPU s), "
                          f"packer build [{engine}: {used}] {pk_s:.2f}s ({pk_cpu:.1f} CPU s): packer "
                          f"x{hf_s / pk_s:.2f} faster (CPU x{hf_cpu / pk_cpu:.2f}; tokens {hf_tokens:,} vs "
                          f"{m['totals']['tokens']:,})", flush=True)
            rows.append(row)
    emit_json({"bench": "hf_datasets_baseline", "inputs": args.inputs,
               "time": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, args.json)


if __name__ == "__main__":
    main()
