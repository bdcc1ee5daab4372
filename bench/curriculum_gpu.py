"""Length curriculum on buckets vs fixed packed rows, one GPU, the same token budget (issue 56 part 2).

    python bench/curriculum_gpu.py --build OUT8192 --buckets OUTB --steps N [--tokens-per-batch 65536]

``OUT8192``: a packer build at seq_len 8192 (``packer repack out/ OUT8192 --seq-len 8192``); ``OUTB``: the same
documents as buckets (``packer repack out/ OUTB --buckets 256:8192``). Model: the Llama-style 124M of
bench/hf_attention.py (its ``model_config``; 12 layers, hidden 768, vocab 50304; bf16 autocast, fused AdamW,
lr 3e-4), the same initial weights for both runs. Each run trains ``--steps`` steps of ``--tokens-per-batch``
slots:

- ``fixed``:  rows of 8192 from ``PackedSampler``, ``attn_implementation=packer_attention()`` (no attention
  across documents; padding counts as slots, not tokens);
- ``cyclic``: ``BucketSampler(schedule="cyclic")`` batches (tokens_per_batch // L rows of one length L),
  plain ``sdpa`` causal (a row is one piece of one document: nothing to mask).

Printed side by side: tokens/s (non-padding tokens over the timed steps, after ``--warmup`` steps), and the
held-out loss of each trained model on the same rows (``--eval``: a packer build, default OUT8192/holdout,
else the first ``--eval-rows`` rows of OUT8192, which training may have seen: said so), through
``packer_attention()``. Without CUDA it says so and exits 0: nothing is run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", required=True, help="a packer build at seq_len 8192 (the fixed-length run)")
    p.add_argument("--buckets", required=True, help="a packer repack --buckets folder (the curriculum run)")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps per run")
    p.add_argument("--tokens-per-batch", type=int, default=65536, help="slots a step (a multiple of 8192)")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the timing")
    p.add_argument("--cycles", type=int, default=8, help="cycles of the curriculum over the buckets' epoch")
    p.add_argument("--eval", default=None, help="held-out build (default: BUILD/holdout if there)")
    p.add_argument("--eval-rows", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.environ.get("OUT") or "bench_out/curriculum_gpu")
    return p.parse_args(argv)


def plan(a, seq_len: int, bucket_lengths: list[int]) -> dict:
    """What each run reads: rows a step and the token budget; refuses a batch that is not whole rows."""
    lengths = sorted(set(bucket_lengths) | {seq_len})
    bad = [L for L in lengths if a.tokens_per_batch % L]
    if bad or a.steps < 1 or a.warmup >= a.steps:
        raise SystemExit(f"--tokens-per-batch {a.tokens_per_batch} must be a multiple of {max(lengths)} (not of {bad}), "
                         f"and --steps ({a.steps}) over --warmup ({a.warmup})")
    return {"budget_slots": a.steps * a.tokens_per_batch, "fixed_rows": a.tokens_per_batch // seq_len,
            "bucket_rows": {L: a.tokens_per_batch // L for L in bucket_lengths}}


def table(results: dict) -> list[str]:
    """The side-by-side lines."""
    lines = [f"{'run':<8} {'tokens/s':>12} {'pad %':>7} {'steps':>6} {'held-out loss':>14}"]
    for name, r in results.items():
        lines.append(f"{name:<8} {r['tokens_per_s']:>12,.0f} {r['padding_pct']:>7.2f} {r['steps']:>6} {r['eval_loss']:>14.4f}")
    return lines


def train(a, state, name, batches, attn):
    """Train a fresh copy of the model on ``batches``; tokens/s over the steps after warm-up."""
    import torch
    from transformers import LlamaForCausalLM

    from bench.hf_attention import model_config

    m = LlamaForCausalLM(model_config(a.model)).cuda()
    m.load_state_dict(state)
    m.set_attn_implementation(attn)
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
    tokens = slots = 0
    t0 = None
    for k, b in enumerate(batches):
        if k == a.warmup:
            torch.cuda.synchronize()
            t0, tokens, slots = time.perf_counter(), 0, 0
        x = {key: b[key].cuda(non_blocking=True) for key in ("input_ids", "labels", "position_ids")}
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(**x, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += int((b["labels"] != -100).sum()) + b["labels"].shape[0]  # (a row's first token has no label)
        slots += b["input_ids"].numel()
    torch.cuda.synchronize()
    s = time.perf_counter() - t0
    print(f"{name}: {len(batches)} steps, last loss {loss.item():.4f}", flush=True)
    return m, {"tokens_per_s": tokens / s, "padding_pct": 100.0 * (1 - tokens / max(1, slots)), "steps": len(batches)}


def held_out_loss(model, rows) -> float:
    import torch

    from packer import packer_attention

    model.set_attn_implementation(packer_attention())
    model.eval()
    tot = n = 0.0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for b in rows:
            x = {k: b[k].cuda() for k in ("input_ids", "labels", "position_ids")}
            k = int((x["labels"][:, 1:] != -100).sum())
            tot += model(**x, use_cache=False).loss.item() * k
            n += k
    return tot / max(n, 1)


def main(argv=None):
    a = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("curriculum_gpu: no CUDA device here: skipped (this benchmark runs on a GPU only)")
        return 0
    from packer import BucketDataset, BucketSampler, PackedDataset, PackedSampler, collate, packer_attention

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)

    fixed, bds = PackedDataset(a.build), BucketDataset(a.buckets)
    p = plan(a, fixed.seq_len, bds.lengths)
    a.model = SimpleNamespace(vocab=fixed.vocab_size, seq=fixed.seq_len, tiny=False)
    from transformers import LlamaForCausalLM

    from bench.hf_attention import model_config

    torch.manual_seed(a.seed)
    state = LlamaForCausalLM(model_config(a.model)).state_dict()
    order = list(PackedSampler(fixed, seed=a.seed))
    B = p["fixed_rows"]
    fixed_batches = [collate([fixed[i] for i in order[k * B:(k + 1) * B]]) for k in range(a.steps)]
    sampler = BucketSampler(bds, a.tokens_per_batch, schedule="cyclic", cycles=a.cycles, seed=a.seed)
    keys = list(sampler)[:a.steps]
    if len(keys) < a.steps:
        raise SystemExit(f"the buckets hold {len(keys)} batches of {a.tokens_per_batch} tokens: lower --steps")
    bucket_batches = [collate(bds.__getitems__(b)) for b in keys]
    eval_path = a.eval or (os.path.join(a.build, "holdout") if os.path.exists(os.path.join(a.build, "holdout", "manifest.json")) else None)
    ev = PackedDataset(eval_path or a.build)
    if eval_path is None:
        print(f"note: no holdout: held-out loss on the first {a.eval_rows} rows of {a.build}, which training may have read")
    eval_rows = [collate([ev[i] for i in range(j, min(j + 2, a.eval_rows, len(ev)))]) for j in range(0, min(a.eval_rows, len(ev)), 2)]
    results = {}
    for name, batches, attn in (("fixed", fixed_batches, packer_attention()), ("cyclic", bucket_batches, "sdpa")):
        model, r = train(a, state, name, batches, attn)
        r["eval_loss"] = held_out_loss(model, eval_rows)
        results[name] = r
        del model
        torch.cuda.empty_cache()
    for line in table(results):
        print(line)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "curriculum_gpu.json"), "w") as f:
        json.dump({"plan": p, "device": torch.cuda.get_device_name(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
