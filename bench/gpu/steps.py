"""The model, the training step, and how a step is timed and counted.

The model is examples/train_gpt.py's GPT (the example users read), at
GPT-2-small size: every variant builds it from one seeded initial state.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Iterable

import numpy as np
import torch

from common import REPO  # bench/common.py

from .config import IGNORE, PEAK_MEASURED, PEAK_SPEC, SEED, Cfg

if os.path.join(REPO, "examples") not in sys.path:
    sys.path.append(os.path.join(REPO, "examples"))  # examples/ is no package
import train_gpt as ex  # noqa: E402  examples/train_gpt.py: GPTConfig, GPT, make_mask, token_losses


def init_state(mc: ex.GPTConfig) -> dict:
    """The one initial state every variant starts from (seeded, on the CPU)."""
    torch.manual_seed(SEED)
    return {k: v.clone() for k, v in ex.GPT(mc).state_dict().items()}


def n_params(mc: ex.GPTConfig) -> int:
    """Parameters, the tied embedding counted once (as the lm_head matmul)."""
    d = mc.d_model
    return mc.vocab_size * d + mc.n_layers * (12 * d * d + 2 * d) + d


def fresh_model(cfg: Cfg, mc: ex.GPTConfig, state: dict, compiled: bool):
    """The model from ``state`` on the device (blocks compiled if asked), and a fresh AdamW."""
    with torch.device(cfg.device):
        model = ex.GPT(mc)
    model.load_state_dict(state)
    if compiled:
        model.compile_blocks()
    kw = {"fused": True} if cfg.cuda else {}
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1, **kw)
    return model, opt


def autocast(cfg: Cfg, dtype: str = "bf16"):
    if cfg.cuda and dtype == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(model, opt, b: dict, kind: str, cfg: Cfg):
    """One step; the mask is built inside it (as a trainer would). Returns the loss, not synchronised."""
    mask = ex.make_mask(b, kind, torch.device(cfg.device))
    with autocast(cfg):
        logits = model(b["input_ids"], b["position_ids"], mask)
    n = (b["labels"][:, 1:] != IGNORE).sum().clamp(min=1)
    loss = ex.token_losses(logits, b["labels"]).sum() / n
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


class Clock:
    """Marks on the device timeline (CUDA events) or the wall clock (CPU)."""

    def __init__(self, cuda: bool):
        self.cuda, self.marks = cuda, []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def intervals(self) -> list[float]:
        """Seconds between consecutive marks (synchronises)."""
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def timed(model, opt, bs: Iterable[dict], kind: str, cfg: Cfg, losses: list | None = None) -> list[float]:
    """Seconds of each step over ``bs`` (an iterator's own work, e.g. a loader's, counted in); losses to ``losses``."""
    clock = Clock(cfg.cuda)
    clock.mark()
    for b in bs:
        loss = train_step(model, opt, b, kind, cfg)
        if losses is not None:
            losses.append(loss)
        clock.mark()
    return clock.intervals()


def sync(cfg: Cfg):
    if cfg.cuda:
        torch.cuda.synchronize()


def graphs() -> int:
    """Graphs dynamo has compiled so far (-1 where it cannot say)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a diagnostic only
        return -1


def sdpa_backend(var: str, cfg: Cfg) -> str:
    """cuDNN SDPA off except for C0 and F, so SDPA-causal rows run FlashAttention-2 (varlen's family)."""
    if not cfg.cuda:
        return "cpu"
    on = var in ("C0", "F")
    torch.backends.cuda.enable_cudnn_sdp(on)
    return "default (cuDNN)" if on else "cuDNN off (FA2)"


def summary(times: list[float], useful: list[int], slots: int, sum_l2: list[int], mc: ex.GPTConfig) -> dict:
    """Rates, padding and MFU of timed steps: MFU = (6 N useful + 6 layers d sum(l^2)) / time / peak."""
    t = sum(times)
    u = sum(useful)
    flops = 6 * n_params(mc) * u + 6 * mc.n_layers * mc.d_model * sum(sum_l2)
    h = len(times) // 2
    halves = None
    if h:
        r1 = sum(useful[:h]) / sum(times[:h])
        r2 = sum(useful[h:]) / sum(times[h:])
        halves = round(abs(r1 - r2) / max(r1, r2), 4)
    return {
        "steps": len(times), "seconds": round(t, 4),
        "useful_tok_s": u / t, "slots_tok_s": slots * len(times) / t,
        "pad_pct": 100.0 * (1 - u / (slots * len(times))),
        "mfu_pct": 100.0 * flops / t / PEAK_MEASURED, "mfu_spec_pct": 100.0 * flops / t / PEAK_SPEC,
        "step_ms_median": 1e3 * float(np.median(times)), "step_ms_min": 1e3 * min(times), "step_ms_max": 1e3 * max(times),
        "halves_spread": halves,
    }


def peak_reset(cfg: Cfg):
    if cfg.cuda:
        torch.cuda.reset_peak_memory_stats()


def peak_gib(cfg: Cfg):
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if cfg.cuda else None


def cleanup(cfg: Cfg):
    gc.collect()
    if cfg.cuda:
        torch.cuda.empty_cache()
