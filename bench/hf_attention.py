"""HF transformers on packed rows: is the document mask free? (issue 16, item 3)

One run, one GPU, every variant side by side on the same model and batches::

    python bench/hf_attention.py                 # H200: Llama-style 124M, 32 x 2048 slots a step
    python bench/hf_attention.py --profile       # then CUDA time by kernel class, host syncs a step
    python bench/hf_attention.py --tiny          # CPU smoke run of every code path (tests/train/test_hf_attention_bench.py)

Model: ``transformers.LlamaForCausalLM`` from a config (no download): 12
layers, hidden 768, 12 heads, SwiGLU 2048, vocab 50304, RoPE; fp32 master
weights, bf16 autocast, fused AdamW (lr 3e-4), the model's own loss. Every
variant starts from the same weights.

Data: the web-like length distribution of bench/gpu_train.py (lognormal,
median 600, sigma 1.2, clipped to [16, 65536]; random ids, EOS last),
packed by packer (bfd) into a packer build; ``--seq`` slots a row.

Variants ("useful" tokens: non-padding; tokens/s = useful / median step):

- ``group``       group_texts rows (the packed rows seen as one stream: positions 0..L-1, no mask,
                  documents attend to each other), sdpa, SDPA's default backend (cuDNN on an H200);
- ``group_fa2``   the same rows, SDPA forced to its FlashAttention-2 backend;
- ``packer``      packer rows, ``attn_implementation=packer_attention()``: rows that are one document
                  through SDPA's default causal kernel, the others through torch ``varlen_attn``; the
                  boundaries found from position_ids (once a forward);
- ``packer_cu``   the same with the batch's ``cu_seq_lens_q``/``max_length_q`` passed to the model;
- ``packer_sorted`` the same, each batch's rows reordered (one-document rows first: the same batch,
                  fewer kernel calls);
- ``packer_split``  ``packer`` with one-document rows split off at any number of runs (``hf.MAX_RUNS`` unbounded);
- ``packer_varlen`` ``packer_attention("torch_varlen")``: every row through ``varlen_attn``;
- ``hf_sdpa``     packer rows through sdpa with transformers' packed-sequence detection (a dense
                  document mask built from position_ids every step);
- ``padded``      one document per row (truncated at L), padded, sdpa with a padding attention_mask.

Correctness: two packed rows through ``packer`` against each document alone
through sdpa (same weights, bf16 autocast): max |logits| difference and the
relative norm of the gradient difference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.gpu_train import padded_batches, packed_batches, read_documents, weblike_lengths, weblike_tokens, write_build  # noqa: E402
from packer import PackedDataset  # noqa: E402
from packer.train import hf  # noqa: E402
from packer.train.batching import whole_rows_first  # noqa: E402


# the nested-tensor routes (SDPA on jagged tensors: flash, or cuDNN's ragged path) were measured and dropped:
# docs/benchmarks.md, "Attention routes on the H200, re-measured"; the script that ran them is at f157fdd
VARIANTS = ("group", "group_fa2", "packer", "packer_cu", "packer_sorted", "packer_split", "packer_varlen", "hf_sdpa",
            "padded")
CU_VARIANTS = ("packer_cu", "packer_sorted", "packer_varlen")
KERNEL_OF = {"packer_varlen": "torch_varlen"}


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="CPU smoke run: 2 layers, hidden 64, seq 128, 2 steps")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--steps", type=int, default=None, help="timed steps per variant per round")
    p.add_argument("--rounds", type=int, default=None, help="rounds over all variants (spread)")
    p.add_argument("--docs", type=int, default=None, help="documents in the web-like corpus")
    p.add_argument("--lengths", help="real document lengths: a packer build of real text, or a .npy of its "
                   "documents' lengths; shuffled, clipped to [16, 65536], random ids (default: web-like lengths)")
    p.add_argument("--profile", action="store_true",
                   help="after the table, profile 2 steps of group, group_fa2 and packer_cu: CUDA time by kernel "
                        "class and the host syncs a step")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of the variants")
    p.add_argument("--out", default=os.environ.get("OUT") or "bench_out/hf_attention")
    a = p.parse_args(argv)
    t = a.tiny
    a.seq = a.seq or (128 if t else 2048)
    a.batch = a.batch or (4 if t else 32)
    a.steps = a.steps or (2 if t else 15)
    a.rounds = a.rounds or (1 if t else 3)
    a.warm = 1 if t else 3  # steps before the timed ones (the first gives the loss); tiny: its CPU steps are the test's time
    a.docs = a.docs or (300 if t else 20000)
    a.vocab = 512 if t else 50304
    a.variants = tuple(v for v in a.variants.split(",") if v)
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad or "group" not in a.variants:
        p.error(f"--variants: unknown {bad}, or 'group' (the baseline) missing; choose from {', '.join(VARIANTS)}")
    return a


def model_config(a):
    from transformers import LlamaConfig

    big = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
               num_key_value_heads=12)
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    return LlamaConfig(vocab_size=a.vocab, max_position_embeddings=max(a.seq, 2048), tie_word_embeddings=True,
                       use_cache=False, **(small if a.tiny else big))


def make_data(a, tmp):
    if a.lengths:  # attention's cost depends on the lengths alone, so real lengths with random ids
        real = np.load(a.lengths) if a.lengths.endswith(".npy") else read_documents(a.lengths)[1]
        real = np.clip(np.random.default_rng(0).permutation(real), 16, 65536)
        lengths = real[np.cumsum(real) <= 2 * a.batch * a.seq * (a.steps * a.rounds + 3)]  # twice the slots used
    else:
        lengths = weblike_lengths(a.docs)
    tokens = weblike_tokens(lengths, a.vocab)
    out = os.path.join(tmp, "web")
    write_build(out, tokens, lengths, a.seq, vocab_size=a.vocab, eos_id=a.vocab - 1, pad_id=a.vocab - 1, name="web")
    ds = PackedDataset(out)
    n = a.steps * a.rounds + 3
    packed = packed_batches(ds, a.batch, n)
    group = [{"input_ids": b["input_ids"], "labels": b["input_ids"].clone(),
              "position_ids": torch.arange(a.seq).expand(a.batch, a.seq).contiguous(),
              "useful": a.batch * a.seq} for b in packed]
    toks, lens = read_documents(out)
    padded = padded_batches(toks, lens, a.seq, a.batch, n, a.vocab - 1, chunks=False)
    for b in padded:
        b["attention_mask"] = (b["labels"] != -100).long()
        b["attention_mask"][:, 0] = 1
    return ds, packed, group, padded, [whole_rows_first(b) for b in packed]


def inputs_of(var, b):
    if var in ("group", "group_fa2"):
        return {k: b[k] for k in ("input_ids", "labels", "position_ids")}
    if var == "padded":
        return {k: b[k] for k in ("input_ids", "labels", "attention_mask")}
    x = {k: b[k] for k in ("input_ids", "labels", "position_ids")}
    if var in CU_VARIANTS:
        cu, mx = b["cu_seqlens"], int(b["max_seqlen"])
        x.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=mx, max_length_k=mx)
    return x


def attn_of(var):
    if var in KERNEL_OF:
        return hf.packer_attention(KERNEL_OF[var])
    return hf.packer_attention() if var.startswith("packer") else "sdpa"


def make_model(a, state, var):
    from transformers import LlamaForCausalLM

    m = LlamaForCausalLM(model_config(a)).to(a.device)
    m.load_state_dict(state)
    m.set_attn_implementation(attn_of(var))
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=a.device.startswith("cuda"))
    return m, opt


def autocast(a):
    return torch.autocast(device_type="cuda" if a.device.startswith("cuda") else "cpu", dtype=torch.bfloat16)


def sdpa_ctx(a, var):
    if var == "group_fa2" and a.device.startswith("cuda"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    import contextlib
    return contextlib.nullcontext()


def step(a, m, opt, var, x):
    with autocast(a), sdpa_ctx(a, var):
        loss = m(**x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def sync(a):
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()


def time_variant(a, state, var, batches, first):
    """Median step seconds over a.steps timed steps (after a.warm warm-up steps: 3, 1 in the tiny plan), and the first step's loss."""
    runs, hf.MAX_RUNS = hf.MAX_RUNS, (10 ** 9 if var == "packer_split" else hf.MAX_RUNS)
    try:
        return _time_variant(a, state, var, batches, first)
    finally:
        hf.MAX_RUNS = runs


def _time_variant(a, state, var, batches, first):
    m, opt = make_model(a, state, var)
    dev = [{k: (v.to(a.device) if isinstance(v, torch.Tensor) else v) for k, v in inputs_of(var, b).items()}
           for b in batches[:a.steps + a.warm]]
    loss0 = float(step(a, m, opt, var, dev[0]).detach()) if first else None
    for x in dev[1:a.warm]:
        step(a, m, opt, var, x)
    sync(a)
    times = []
    for x in dev[a.warm:]:
        if a.device.startswith("cuda"):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            step(a, m, opt, var, x)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3)
        else:
            t0 = time.perf_counter()
            step(a, m, opt, var, x)
            times.append(time.perf_counter() - t0)
    del m, opt
    if a.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return float(np.median(times)), loss0


def kernel_class(name: str) -> str:
    n = name.lower()
    if "flash" in n or "fmha" in n or "cudnn" in n or "attn" in n or "attention" in n:
        return "attention"
    if "gemm" in n or "cutlass" in n or "sm90" in n or "nvjet" in n or "matmul" in n:
        return "matmul"
    if "copy" in n or "cast" in n or "memcpy" in n:
        return "copy/cast"
    return "other"


def profile_variant(a, state, var, batches):
    """CUDA ms a step by kernel class, the top kernels, and the host syncs a step."""
    from torch.profiler import ProfilerActivity, profile
    import warnings

    m, opt = make_model(a, state, var)
    dev = [{k: (v.to(a.device) if isinstance(v, torch.Tensor) else v) for k, v in inputs_of(var, b).items()}
           for b in batches[:5]]
    for x in dev[:3]:
        step(a, m, opt, var, x)
    sync(a)
    torch.cuda.set_sync_debug_mode(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step(a, m, opt, var, dev[3])
        sync(a)
    torch.cuda.set_sync_debug_mode(0)
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for x in dev[3:5]:
            step(a, m, opt, var, x)
        sync(a)
    classes, kernels = {}, []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if t <= 0:
            continue
        c = kernel_class(e.key)
        classes[c] = classes.get(c, 0.0) + t / 2e3  # us over 2 steps -> ms a step
        kernels.append((t / 2e3, e.count // 2, e.key[:90]))
    del m, opt
    torch.cuda.empty_cache()
    kernels.sort(reverse=True)
    return {"ms_by_class": classes, "syncs_per_step": syncs, "top": kernels[:12]}


def correctness(a, state, ds, var="packer"):
    """Two packed rows and a one-document row through variant ``var``'s attention vs. each document alone
    through sdpa; on CUDA also the attention kernels that ran."""
    kernel = KERNEL_OF.get(var, "auto")
    from transformers import LlamaForCausalLM

    m = LlamaForCausalLM(model_config(a)).to(a.device)
    m.load_state_dict(state)
    n_docs = [len(ds[i]["doc_lens"]) for i in range(min(len(ds), 64))]
    whole = [i for i, n in enumerate(n_docs) if n == 1][:1]  # a one-document row: the dense path
    b = ds.batch(list(np.argsort([-n for n in n_docs])[:2]) + whole)
    ids, pos, lab = (b[k].to(a.device) for k in ("input_ids", "position_ids", "labels"))
    m.set_attn_implementation(hf.packer_attention(kernel))
    ran = []
    with autocast(a), sdpa_ctx(a, var):
        logits = m(input_ids=ids, position_ids=pos).logits.float()
        if a.device.startswith("cuda"):
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                loss = m(input_ids=ids, position_ids=pos, labels=lab).loss
                loss.backward()
            ran = sorted({e.key[:80] for e in prof.key_averages() if kernel_class(e.key) == "attention"})
        else:
            loss = m(input_ids=ids, position_ids=pos, labels=lab).loss
            loss.backward()
    g_packed = torch.cat([p.grad.flatten() for p in m.parameters()])
    m.zero_grad()
    m.set_attn_implementation("sdpa")
    n_lab = int((lab != -100).sum())
    diff, total = 0.0, 0.0
    cu = b["cu_seqlens"].tolist()
    flat_ids, flat_lab, flat_logits = ids.reshape(-1), lab.reshape(-1), logits.reshape(-1, logits.shape[-1])
    for s, e in zip(cu[:-1], cu[1:]):
        with autocast(a):
            out = m(input_ids=flat_ids[s:e][None])
            lg = out.logits.float()
            la = flat_lab[s:e][None]
            sl = torch.nn.functional.cross_entropy(lg[0, :-1], la[0, 1:], ignore_index=-100, reduction="sum")
        (sl / n_lab).backward()
        diff = max(diff, float((lg[0].detach() - flat_logits[s:e].detach()).abs().max()))
        total = max(total, float(lg.detach().abs().max()))
    g_alone = torch.cat([p.grad.flatten() for p in m.parameters()])
    rel = float((g_packed - g_alone).norm() / g_alone.norm())
    return {"segments": len(cu) - 1, "max_abs_logit_diff": diff, "max_abs_logit": total, "grad_rel_diff": rel,
            "kernel": hf._pick(torch.empty(1, device=a.device, dtype=torch.bfloat16), kernel), "attention_kernels": ran}


def main(argv=None):
    a = parse(argv)
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {a.device}"
          + (f" ({torch.cuda.get_device_name()})" if a.device.startswith("cuda") else ""), flush=True)
    torch.manual_seed(0)
    from transformers import LlamaForCausalLM
    state = {k: v.clone() for k, v in LlamaForCausalLM(model_config(a)).state_dict().items()}
    with tempfile.TemporaryDirectory() as tmp:
        ds, packed, group, padded, packed_sorted = make_data(a, tmp)
        data = {"group": group, "group_fa2": group, "padded": padded, "packer_sorted": packed_sorted}
        res = {"correctness": {}}
        times = {v: [] for v in a.variants}
        loss0 = {}
        for r in range(a.rounds):
            for v in a.variants:
                try:
                    t, l0 = time_variant(a, state, v, data.get(v, packed), r == 0)
                except Exception as e:  # one variant failing must not lose the others' figures
                    print(f"round {r} {v}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                    t, l0 = float("nan"), None
                    if a.device.startswith("cuda"):
                        torch.cuda.empty_cache()
                times[v].append(t)
                if l0 is not None:
                    loss0[v] = l0
                print(f"round {r} {v}: {t * 1e3:.1f} ms/step", flush=True)
        # after the timings: a kernel that breaks the CUDA context must not lose them
        for var in [v for v in ("packer", "packer_varlen") if v in a.variants]:
            try:
                res["correctness"][var] = correctness(a, state, ds, var)
            except Exception as e:
                res["correctness"][var] = f"FAILED {type(e).__name__}: {str(e)[:300]}"
            print(f"correctness {var}:", json.dumps(res["correctness"][var]), flush=True)
    useful = {v: float(np.mean([b["useful"] for b in data.get(v, packed)[a.warm:a.steps + a.warm]])) for v in a.variants}
    tps = {v: useful[v] / float(np.nanmedian(times[v]) if not np.all(np.isnan(times[v])) else np.nan) for v in a.variants}
    res.update(times=times, useful_per_step=useful, tokens_per_s=tps, first_loss=loss0, args=vars(a))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "hf_attention.json"), "w") as f:
        json.dump(res, f, indent=1)
    base = tps["group"]
    print("\n| variant | ms/step (rounds) | useful tokens/step | useful tok/s | vs group (cuDNN) | vs group_fa2 | "
          "vs padded | first loss |")
    print("|---|---|---|---|---|---|---|---|")
    fa2, pad = tps.get("group_fa2", float("nan")), tps.get("padded", float("nan"))
    for v in a.variants:
        ms = ", ".join(f"{t * 1e3:.1f}" for t in times[v])
        print(f"| {v} | {ms} | {useful[v]:,.0f} | {tps[v]:,.0f} | {tps[v] / base:.3f} | "
              f"{tps[v] / fa2:.3f} | {tps[v] / pad:.2f} | {loss0.get(v, float('nan')):.4f} |")

    if a.profile and a.device.startswith("cuda"):
        try:
            prof = {v: profile_variant(a, state, v, data.get(v, packed)) for v in ("group", "group_fa2", "packer_cu", "packer_sorted")
                    if v in a.variants}
        except Exception as e:  # the table above stands without it
            print(f"profile FAILED {type(e).__name__}: {e}")
            return
        res["profile"] = prof
        with open(os.path.join(a.out, "hf_attention.json"), "w") as f:
            json.dump(res, f, indent=1)
        print("\n| variant | syncs/step | " + " | ".join(f"{c} ms" for c in ("attention", "matmul", "copy/cast", "other"))
              + " | total ms |")
        print("|---|---|---|---|---|---|---|")
        for v, p in prof.items():
            c = p["ms_by_class"]
            print(f"| {v} | {p['syncs_per_step']} | " + " | ".join(f"{c.get(k, 0):.1f}" for k in
                  ("attention", "matmul", "copy/cast", "other")) + f" | {sum(c.values()):.1f} |")
        for v, p in prof.items():
            print(f"\n{v}: top kernels (ms a step, calls a step)")
            for t, n, k in p["top"]:
                print(f"  {t:7.2f} {n:5d}  {k}")


if __name__ == "__main__":
    main()
