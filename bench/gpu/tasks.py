"""The run's state (budget, prepared corpora, the model) and the two timing tasks: train and loader."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from packer.train.dataset import PackedDataset
from packer.train.sampler import PackedLoader, PackedSampler

from . import steps
from .config import ATTN, SEED, Cfg
from .data import packed_batches, padded_batches, prepare_real, prepare_web, read_documents, to_device
from .steps import ex


class BudgetExceeded(BaseException):
    """Raised by SIGALRM when --budget-s runs out (BaseException: a task's except Exception lets it through)."""


@dataclass
class Corpus:
    name: str
    seq: int
    path: str
    ds: PackedDataset
    prep: dict
    docs: tuple | None = None  # (tokens, lengths), read on first need


@dataclass
class Run:
    cfg: Cfg
    t0: float = field(default_factory=time.perf_counter)
    results: list = field(default_factory=list)
    corpora: dict = field(default_factory=dict)
    failed_prep: dict = field(default_factory=dict)
    compiled_keys: set = field(default_factory=set)
    env: dict = field(default_factory=dict)
    mc: ex.GPTConfig | None = None
    state: dict | None = None

    def left(self) -> float:
        return self.cfg.budget_s - (time.perf_counter() - self.t0)


def corpus(run: Run, name: str, seq: int) -> Corpus:
    """The corpus ``name`` built at ``seq``, prepared on first need (a failure is remembered)."""
    key = (name, seq)
    if key in run.failed_prep:
        raise RuntimeError(f"preparing {name} at {seq} failed earlier: {run.failed_prep[key]}")
    if key not in run.corpora:
        try:
            prep = prepare_real(run.cfg, seq) if name == "real" else prepare_web(run.cfg, seq)
            ds = PackedDataset(prep["path"], verify=not prep["cached"])
        except Exception as e:
            run.failed_prep[key] = f"{type(e).__name__}: {e}"
            raise
        m = ds.builds[0].manifest
        prep.update(rows=len(ds), tokens=int(m["totals"]["tokens"]), documents=int(m["totals"]["documents"]),
                    padding_pct=float(m["totals"]["padding_pct"]), vocab_size=ds.vocab_size)
        run.corpora[key] = Corpus(name, seq, prep["path"], ds, prep)
        print(f"[prep] {name} seq {seq}: {prep}", flush=True)
    return run.corpora[key]


def model_for(run: Run, cp: Corpus) -> tuple[ex.GPTConfig, dict]:
    """The model (config, initial state) every variant uses; sized for the corpora prepared so far."""
    if run.mc is None:
        c = run.cfg
        vocab = -(-max(k.ds.vocab_size for k in run.corpora.values()) // 64) * 64  # GPT-2: 50304
        run.mc = ex.GPTConfig(vocab, c.d_model, c.layers, c.heads)
        run.state = steps.init_state(run.mc)
    if cp.ds.vocab_size > run.mc.vocab_size:
        raise ValueError(f"{cp.name} has vocab {cp.ds.vocab_size} > the model's {run.mc.vocab_size}")
    return run.mc, run.state


def batches_for(run: Run, cp: Corpus, var: str, n: int) -> list[dict]:
    B = run.cfg.slots // cp.seq
    if var in ("A", "A2"):
        if cp.docs is None:
            cp.docs = read_documents(cp.path)
        tok, ln = cp.docs
        return padded_batches(tok, ln, cp.seq, B, n, cp.ds.pad_id, chunks=var == "A2")
    bs = packed_batches(cp.ds, B, n)
    if var in ("C", "C0"):  # no mask: positions run over the whole row
        for b in bs:
            b["position_ids"] = torch.arange(cp.seq).expand(B, cp.seq).contiguous()
    return bs


def task_train(run: Run, t: dict) -> dict:
    """One variant: warm-up steps, then ``--steps`` timed steps on batches already on the device."""
    cfg = run.cfg
    cp = corpus(run, t["corpus"], t["seq"])
    mc, state = model_for(run, cp)
    var, compiled = t["var"], t["mode"] == "compiled"
    kind = ATTN[var]
    if not cfg.cuda and kind in ("flex", "varlen"):
        return {"status": "skipped", "reason": f"{kind} training needs CUDA (flex has no backward on CPU; varlen is CUDA-only)"}
    warm = cfg.cwarmup if compiled else cfg.warmup
    backend = steps.sdpa_backend(var, cfg)
    bs = [to_device(b, cfg.device) for b in batches_for(run, cp, var, warm + cfg.steps)]
    model, opt = steps.fresh_model(cfg, mc, state, compiled)
    steps.peak_reset(cfg)
    tw = time.perf_counter()
    losses = [steps.train_step(model, opt, b, kind, cfg) for b in bs[:warm]]
    steps.sync(cfg)
    warm_s = time.perf_counter() - tw
    g0 = steps.graphs()
    times = steps.timed(model, opt, bs[warm:], kind, cfg, losses)
    g1 = steps.graphs()
    ls = torch.stack(losses).float().cpu()
    res = steps.summary(times, [b["useful"] for b in bs[warm:]], cfg.slots, [b["sum_l2"] for b in bs[warm:]], mc)
    res.update(status="ok", warmup_s=round(warm_s, 2), peak_gib=steps.peak_gib(cfg), sdpa=backend,
               loss_first=round(float(ls[0]), 4), loss_last=round(float(ls[-1]), 4),
               loss_finite=bool(torch.isfinite(ls).all()), graphs_new_in_timed_steps=g1 - g0 if g0 >= 0 else None,
               rows_per_step=cfg.slots // cp.seq)
    if compiled:
        run.compiled_keys.add((kind, cp.seq))
    return res


def _loader(cp: Corpus, B: int, cfg: Cfg, seed: int = SEED) -> PackedLoader:
    W = cfg.loader_workers
    return PackedLoader(cp.ds, B, sampler=PackedSampler(cp.ds, seed=seed), num_workers=W, pin_memory=cfg.cuda,
                        drop_last=True, **({"prefetch_factor": 2} if W else {}))


class _Fed:
    """Batches from a loader's iterator, moved with non_blocking copies; times the waits and the copies."""

    def __init__(self, it, resident: list[dict], device):
        self.it, self.resident, self.device = it, resident, device
        self.waits, self.copies = [], []

    def get(self, j: int) -> dict:
        a = time.perf_counter()
        b = next(self.it)
        c = time.perf_counter()
        out = to_device(b, self.device, non_blocking=True)
        self.waits.append(c - a)
        self.copies.append(time.perf_counter() - c)
        out["useful"], out["sum_l2"] = self.resident[j]["useful"], self.resident[j]["sum_l2"]
        return out


def _loader_alone(cp: Corpus, B: int, cfg: Cfg) -> float:
    """Batches/s the loader delivers with no training (another seed: no rows cached by the run)."""
    lo = _loader(cp, B, cfg, SEED + 1)
    it, m = iter(lo), min(len(lo), max(8, cfg.loader_steps))
    next(it)
    a = time.perf_counter()
    for _ in range(m - 1):
        next(it)
    return (m - 1) / (time.perf_counter() - a)


def _phases(model, opt, fed: _Fed, resident: list[dict], kind: str, cfg: Cfg, warm: int) -> tuple[dict, dict]:
    """Loader, resident (same rows), loader, resident: ``loader_steps`` each. (step times, main-thread ms)"""
    T = cfg.loader_steps
    phases = {"loader": [], "resident": []}
    stall = {"wait_ms": [], "copy_launch_ms": []}
    for p in range(2):
        rows = range(warm + p * T, warm + (p + 1) * T)
        fed.waits.clear()
        fed.copies.clear()
        phases["loader"].append(steps.timed(model, opt, (fed.get(j) for j in rows), kind, cfg))
        stall["wait_ms"].append(round(1e3 * sum(fed.waits), 2))
        stall["copy_launch_ms"].append(round(1e3 * sum(fed.copies), 2))
        phases["resident"].append(steps.timed(model, opt, (resident[j] for j in rows), kind, cfg))
    return phases, stall


def task_loader(run: Run, t: dict) -> dict:
    """D fed by PackedLoader against the same rows already on the device, interleaved on one model."""
    cfg = run.cfg
    cp = corpus(run, t["corpus"], t["seq"])
    mc, state = model_for(run, cp)
    compiled = t["mode"] == "compiled"
    kind = "flex" if cfg.cuda else "dense"
    steps.sdpa_backend("D", cfg)
    B, warm = cfg.slots // cp.seq, cfg.cwarmup if compiled else cfg.warmup
    n = warm + 2 * cfg.loader_steps
    resident = [to_device(b, cfg.device) for b in packed_batches(cp.ds, B, n)]
    loader = _loader(cp, B, cfg)
    if len(loader) < n:
        return {"status": "skipped", "reason": f"{len(loader)} batches in the build, {n} needed"}
    model, opt = steps.fresh_model(cfg, mc, state, compiled)
    steps.peak_reset(cfg)
    fed = _Fed(iter(loader), resident, cfg.device)
    same = True
    for j in range(warm):  # warm-up from the loader; check it reads the resident rows
        b = fed.get(j)
        same &= bool(torch.equal(b["input_ids"], resident[j]["input_ids"]))
        steps.train_step(model, opt, b, kind, cfg)
    steps.sync(cfg)
    phases, stall = _phases(model, opt, fed, resident, kind, cfg, warm)
    del fed
    useful, l2 = [b["useful"] for b in resident[warm:]], [b["sum_l2"] for b in resident[warm:]]
    out = {name: steps.summary(ts[0] + ts[1], useful, cfg.slots, l2, mc) for name, ts in phases.items()}
    alone, steps_s = _loader_alone(cp, B, cfg), 1 / (out["resident"]["step_ms_median"] / 1e3)
    if compiled:
        run.compiled_keys.add((kind, cp.seq))
    return {
        "status": "ok", "attention": kind, "rows_identical": same, "workers": cfg.loader_workers, "pin_memory": cfg.cuda,
        "note": None if cfg.cuda else "CPU: the dense mask stands in for flex (no flex backward on CPU)",
        "loader_over_resident": round(out["loader"]["useful_tok_s"] / out["resident"]["useful_tok_s"], 4),
        "per_phase_ratio": [round(sum(r) / sum(lo), 4) for lo, r in zip(phases["loader"], phases["resident"])],
        "loader_alone_batches_s": round(alone, 1), "gpu_steps_s": round(steps_s, 2),
        "loader_headroom": round(alone / steps_s, 1), "main_thread": stall, "peak_gib": steps.peak_gib(cfg),
        "phases": out, "rows_per_step": B,
    }
