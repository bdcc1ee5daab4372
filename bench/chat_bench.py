"""A chat build against a raw-text build of the same tokens, side by side, same cores.

Makes ``--conversations`` conversations from real text (tests/chat_data.py:
the standard library's docstrings; several turns, system prompts, short and
long replies) and writes them twice:

- chat.jsonl: the records (``messages``, some ``prompt``/``completion``),
  built with ``packer build --chat`` (render the template, tokenize with
  offsets, loss mask);
- text.jsonl: each conversation already rendered by transformers'
  ``apply_chat_template(tokenize=False)``, one document per conversation,
  built with ``--no-eos``: the same tokens, with no template or mask work.

The raw build runs twice, with the default engine choice (``auto``: tiktoken
where it gives HF's ids, as a user would run it) and with ``--tokenizer-backend
hf`` (the engine the chat path uses). Each build is the ``packer build``
command end to end, pinned to the same N cores; rounds are interleaved.
Prints tokens/s of each and the ratios chat / raw (the issue's bar: >= 0.5).

    python bench/chat_bench.py --conversations 30000 --workers 1 2 --rounds 2
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

from common import emit_json, pin  # bench/common.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA3 = os.path.join(REPO, "..", "shared", "data", "llama3")


def make_inputs(folder: str, n: int, tokenizer: str) -> tuple[str, str]:
    sys.path.insert(0, REPO)
    from transformers import AutoTokenizer

    from tests.chat_data import conversations

    recs = conversations(n, seed=0, max_turns=6)
    tk = AutoTokenizer.from_pretrained(tokenizer)
    msgs = [r.get("messages") or [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]
            for r in recs]
    texts = tk.apply_chat_template(msgs, tokenize=False)
    chat, text = os.path.join(folder, "chat.jsonl"), os.path.join(folder, "text.jsonl")
    with open(chat, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)
    with open(text, "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    return chat, text


def run_build(args: list[str], n: int) -> tuple[float, dict]:
    out = args[1]
    cmd = pin(n) + [sys.executable, "-m", "packer.cli", "build", *args, "--workers", str(n), "--overwrite", "-q"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    dt = time.perf_counter() - t0
    with open(os.path.join(out, "manifest.json")) as f:
        return dt, json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=30000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokenizer", default=LLAMA3)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--json", default=None, help="append the result line to this file")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        chat, text = make_inputs(tmp, a.conversations, a.tokenizer)
        common = ["--tokenizer", a.tokenizer, "--seq-len", str(a.seq_len)]
        kinds = {
            "chat": [chat, os.path.join(tmp, "o_chat"), "--chat", *common],
            "raw_auto": [text, os.path.join(tmp, "o_auto"), "--no-eos", *common],
            "raw_hf": [text, os.path.join(tmp, "o_hf"), "--no-eos", "--tokenizer-backend", "hf", *common],
        }
        result = {"bench": "chat_bench", "conversations": a.conversations, "mb": round(os.path.getsize(chat) / 1e6, 1)}
        for n in a.workers:
            rates: dict[str, list[float]] = {k: [] for k in kinds}
            for _ in range(a.rounds):
                for k, args in kinds.items():
                    dt, m = run_build(args, n)
                    rates[k].append(m["totals"]["tokens"] / dt)
                    result[f"tokens_{k}"] = m["totals"]["tokens"]
            med = {k: statistics.median(v) for k, v in rates.items()}
            for k, v in med.items():
                print(f"workers {n}: {k:<9} {v / 1e6:6.2f} M tokens/s  (rounds: {', '.join(f'{x / 1e6:.2f}' for x in rates[k])})")
            print(f"workers {n}: chat / raw_auto {med['chat'] / med['raw_auto']:.3f}   chat / raw_hf {med['chat'] / med['raw_hf']:.3f}")
            result[f"w{n}"] = {**{k: round(v) for k, v in med.items()},
                               "chat_over_raw_auto": round(med["chat"] / med["raw_auto"], 3),
                               "chat_over_raw_hf": round(med["chat"] / med["raw_hf"], 3)}
        emit_json(result, a.json)


if __name__ == "__main__":
    main()
