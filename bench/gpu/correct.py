"""The correctness task: packed rows under each mask against every document piece run alone.

eager: two rows with many documents (one with a padding tail if any), bf16
autocast and fp32 (CUDA), flex / varlen / dense / no mask (the control, which
must differ). compiled: the first training batch of the packed order (the
shape the compiled D graph was built for, so no new compile), flex, bf16.
The reference runs each piece alone through the eager model (causal SDPA,
positions from 0); loss = sum of token losses / tokens of the whole batch, so
the gradients are comparable. Measures: relative L2 error of the logits and
of all parameter gradients.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import torch.nn.functional as F

from packer.train.dataset import PackedDataset

from . import steps
from .config import IGNORE
from .data import packed_order, to_device
from .steps import ex
from .tasks import BudgetExceeded, Run, corpus, model_for

TOL = {"bf16": {"logits": 2e-2, "grads": 5e-2}, "fp32": {"logits": 1e-3, "grads": 1e-3}}
NAMES = {"flex": "D flex", "varlen": "E varlen", "dense": "F dense", "causal": "C no mask (control)"}


def pick_rows(ds: PackedDataset, n: int = 2, among: int = 512) -> list[int]:
    """The ``n`` rows with the most pieces among the first ``among``, one with a padding tail if any."""
    b = ds.batch(list(range(min(among, len(ds)))))
    at = b["_piece_at"]
    pieces = np.diff(at)
    dl = b["_doc_lens"].numpy().astype(np.int64)
    used = np.add.reduceat(dl, at[:-1]) if len(dl) else np.zeros(len(pieces))
    order = np.argsort(-pieces, kind="stable")
    rows = [int(order[0])]
    tail = [int(r) for r in order if used[r] < ds.seq_len]
    if tail and tail[0] not in rows:
        rows.append(tail[0])
    for r in order:
        if len(rows) >= n:
            break
        if int(r) not in rows:
            rows.append(int(r))
    return rows[:n]


class Case:
    """The rows checked, on the device: batch, next-token targets, and every piece as (row, slot, length)."""

    def __init__(self, ds: PackedDataset, rows: list[int], device):
        cpu = ds.batch(rows)
        at, dl = cpu["_piece_at"], cpu["_doc_lens"].numpy().astype(np.int64)
        self.rows, self.L, self.device = rows, ds.seq_len, device
        self.per_row = [int(at[r + 1] - at[r]) for r in range(len(rows))]
        self.pieces = []
        for r in range(len(rows)):
            s = 0
            for ln in dl[at[r]:at[r + 1]].tolist():
                self.pieces.append((r, s, ln))
                s += ln
        keys = ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens", "max_seqlen")
        self.batch = to_device({k: cpu[k] for k in keys}, device)
        self.tgt = F.pad(self.batch["labels"][:, 1:], (0, 1), value=IGNORE)
        self.n_tgt = int((self.tgt != IGNORE).sum())

    def reference(self, run: Run, dt: str) -> tuple[list, dict, float]:
        """Every piece alone through the eager model: per piece (logits, token losses); gradients; loss sum."""
        model, _ = steps.fresh_model(run.cfg, run.mc, run.state, False)
        ref = []
        for r, s, ln in self.pieces:
            ids = self.batch["input_ids"][r:r + 1, s:s + ln]
            pos = torch.arange(ln, device=self.device)[None]
            with steps.autocast(run.cfg, dt):
                lg = model(ids, pos, ex.Mask("causal"))[0].float()
            tl = F.cross_entropy(lg, self.tgt[r, s:s + ln], ignore_index=IGNORE, reduction="none")
            (tl.sum() / self.n_tgt).backward()
            ref.append((lg.detach(), tl.detach()))
        grads = {k: p.grad.detach().float().clone() for k, p in model.named_parameters()}
        return ref, grads, float(sum(float(tl.sum()) for _, tl in ref))


def compare(run: Run, case: Case, kind: str, compiled: bool, dt: str, ref) -> dict:
    """One packed forward (+ backward where there is one) against the per-piece reference."""
    cfg, (ref_out, ref_grads, ref_sum) = run.cfg, ref
    grad = cfg.cuda or kind != "flex"
    model, _ = steps.fresh_model(cfg, run.mc, run.state, compiled and kind == "flex")
    pos = case.batch["position_ids"]
    if kind == "causal":  # the control: no mask, positions over the whole row
        pos = torch.arange(case.L, device=case.device).expand_as(pos)
    with contextlib.nullcontext() if grad else torch.no_grad():
        mask = ex.make_mask(case.batch, kind, torch.device(cfg.device))
        with steps.autocast(cfg, dt):
            logits = model(case.batch["input_ids"], pos, mask)
        tl = F.cross_entropy(logits.reshape(-1, run.mc.vocab_size).float(), case.tgt.reshape(-1),
                             ignore_index=IGNORE, reduction="none").view(case.tgt.shape)
    num = den = worst_tok = 0.0
    for (r, s, ln), (rl, rt) in zip(case.pieces, ref_out):
        d = logits[r, s:s + ln].float() - rl
        num, den = num + float((d * d).sum()), den + float((rl * rl).sum())
        worst_tok = max(worst_tok, float((tl[r, s:s + ln] - rt).abs().max()))
    res = {"logits_rel_err": math.sqrt(num / den), "max_token_loss_diff": worst_tok,
           "mean_loss_diff": abs(float(tl.sum()) - ref_sum) / case.n_tgt}
    if not grad:
        return res | {"grads_rel_err": None, "grads_note": "flex has no backward on CPU: logits only"}
    (tl.sum() / case.n_tgt).backward()
    gnum = gden = worst = 0.0
    for k, p in model.named_parameters():
        g, gr = p.grad.detach().float(), ref_grads[k]
        e, nr = float((g - gr).norm()), float(gr.norm())
        gnum, gden = gnum + e * e, gden + nr * nr
        if nr > 0:
            worst = max(worst, e / nr)
    return res | {"grads_rel_err": math.sqrt(gnum / gden), "grads_worst_param_rel_err": worst}


def check(run: Run, case: Case, kind: str, compiled: bool, dt: str, ref) -> dict:
    """One row of the table: the figures and pass / FAIL (the control: differs / FAIL), or the error."""
    row = {"variant": NAMES[kind], "dtype": dt}
    if kind == "varlen" and dt == "fp32":
        return row | {"status": "n/a", "reason": "varlen_attn (FA2) runs in bf16/fp16 only"}
    try:
        row.update(compare(run, case, kind, compiled, dt, ref))
    except BudgetExceeded:
        raise
    except Exception as e:  # noqa: BLE001 - record and go on
        return row | {"status": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    tol = TOL[dt]
    if kind == "causal":
        row["status"] = "differs (as it must)" if row["logits_rel_err"] > 10 * tol["logits"] else "FAIL: the control matches"
    else:
        ok = row["logits_rel_err"] < tol["logits"] and (row["grads_rel_err"] is None or row["grads_rel_err"] < tol["grads"])
        row["status"] = "pass" if ok else "FAIL"
    return row


def task_correct(run: Run, t: dict) -> dict:
    cfg = run.cfg
    cp = corpus(run, t["corpus"], t["seq"])
    model_for(run, cp)
    compiled = t["mode"] == "compiled"
    steps.sdpa_backend("D", cfg)
    if compiled:
        rows = packed_order(cp.ds)[:cfg.slots // cp.seq].tolist()
        dtypes, kinds = ("bf16",) if cfg.cuda else ("fp32",), ["flex"]
    else:
        rows = pick_rows(cp.ds)
        dtypes = ("bf16", "fp32") if cfg.cuda else ("fp32",)
        kinds = ["flex", "varlen", "dense", "causal"] if cfg.cuda else ["flex", "dense", "causal"]
    case = Case(cp.ds, rows, cfg.device)
    out = {"rows": rows if len(rows) <= 4 else f"first training batch ({len(rows)} rows)",
           "pieces": len(case.pieces), "pieces_per_row": case.per_row[:8],
           "seq": cp.seq, "mode": t["mode"], "tolerance": TOL, "checks": []}
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        for dt in dtypes:
            ref = case.reference(run, dt)
            for kind in kinds:
                out["checks"].append(check(run, case, kind, compiled, dt, ref))
                print(f"[correct] {out['checks'][-1]}", flush=True)
            del ref
            steps.cleanup(cfg)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    out["status"] = "ok"
    out["all_pass"] = all(
        c["status"].startswith("differs") if c["variant"].startswith("C") else c["status"] in ("pass", "n/a")
        for c in out["checks"])
    return out
