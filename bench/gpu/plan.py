"""The plans (which tasks, in which order), running them within the budget, and the line each one prints."""

from __future__ import annotations

import time
import traceback

from .config import ATTN, Cfg
from .correct import task_correct
from .report import label, one_line, write_outputs
from .steps import cleanup
from .tasks import BudgetExceeded, Run, task_loader, task_train


def plan(cfg: Cfg) -> list[dict]:
    """part1: eager, correctness, loader, the long seq last; part2: compiled blocks, real at the long seq."""
    s, l = cfg.seqs

    def tr(corpus_, seq, var, mode="eager"):
        return {"task": "train", "corpus": corpus_, "seq": seq, "var": var, "mode": mode}

    part1 = (
        [{"task": "correct", "corpus": "web", "seq": s, "mode": "eager"}]
        + [tr("web", s, v) for v in ("A", "A2", "C", "D", "E", "F")]
        + [tr("real", s, v) for v in ("A", "A2", "C", "D", "E", "F")]
        + [{"task": "loader", "corpus": "web", "seq": s, "mode": "eager"}]
        + [tr("web", s, "C0")]
        + [tr("web", l, v) for v in ("A", "A2", "C", "D", "E")]  # last: skipped first if time runs short
    )
    part2 = (
        [tr("web", s, v, "compiled") for v in ("A", "C", "D")]
        + [{"task": "correct", "corpus": "web", "seq": s, "mode": "compiled"}]  # reuses D's graph
        + [tr("web", s, "E", "compiled")]
        + [{"task": "loader", "corpus": "web", "seq": s, "mode": "compiled"}]
        + [tr("real", l, v) for v in ("A", "A2", "C", "D", "E")]
        + [tr("real", l, v, "compiled") for v in ("A", "C", "D", "E")]
    )
    tasks = {"part1": part1, "part2": part2, "all": part1 + part2}[cfg.plan]
    if cfg.only:
        tasks = [t for t in tasks if any(o in label(t) for o in cfg.only)]
    return tasks


def estimate_s(run: Run, t: dict) -> float:
    """Rough seconds a task takes on the H200 (CPU: small), to skip what cannot finish."""
    cfg = run.cfg
    if not cfg.cuda:
        return 2.0
    long_ = t["seq"] == cfg.seqs[1]
    compiled = t["mode"] == "compiled"
    step = (0.30 if long_ else 0.21) * (0.87 if compiled else 1.0)
    prep = 0.0
    if (t["corpus"], t["seq"]) not in run.corpora:
        prep = 45.0 if t["corpus"] == "real" else 10.0
    if t["task"] == "correct":
        return prep + (30.0 if ("flex", t["seq"]) in run.compiled_keys else 90.0) if compiled else prep + 60.0
    kind = "flex" if t["task"] == "loader" else ATTN[t["var"]]
    comp = 0.0
    if compiled and (kind, t["seq"]) not in run.compiled_keys:
        comp = 70.0
    elif not compiled and kind == "flex" and ("eager-flex", t["seq"]) not in run.compiled_keys:
        comp = 35.0
    if t["task"] == "loader":
        n = (cfg.cwarmup if compiled else cfg.warmup) + 4 * cfg.loader_steps
        return prep + comp + n * step + 15.0
    n = (cfg.cwarmup if compiled else cfg.warmup) + cfg.steps
    return prep + comp + n * step + 6.0


def run_tasks(run: Run) -> None:
    """Every task of the plan in turn: skipped when it would not fit the budget, recorded when it fails."""
    cfg = run.cfg
    tasks = plan(cfg)
    fired = False
    for i, t in enumerate(tasks):
        rec = dict(t)
        left, need = run.left(), estimate_s(run, t)
        if t["mode"] == "compiled" and cfg.no_compile:
            rec.update(status="skipped", reason="--no-compile")
        elif fired or left - 10 < need:
            rec.update(status="skipped", reason=f"budget: {max(left, 0):.0f} s left, task needs ~{need:.0f} s")
        else:
            a = time.perf_counter()
            try:
                fn = {"train": task_train, "loader": task_loader, "correct": task_correct}[t["task"]]
                rec.update(fn(run, t))
                if t["task"] != "correct" and ATTN.get(t.get("var"), "flex") == "flex" and t["mode"] == "eager":
                    run.compiled_keys.add(("eager-flex", t["seq"]))
            except BudgetExceeded:
                fired = True
                rec.update(status="skipped", reason="budget ran out during the task")
            except Exception as e:  # noqa: BLE001 - one failing variant must not end the run
                rec.update(status="error", error=f"{type(e).__name__}: {str(e)[:500]}",
                           traceback=traceback.format_exc()[-2000:])
            rec["task_s"] = round(time.perf_counter() - a, 1)
            cleanup(cfg)
        run.results.append(rec)
        print(f"[{i + 1}/{len(tasks)} {time.perf_counter() - run.t0:5.0f}s] {one_line(rec)}", flush=True)
        write_outputs(run)


def dynamo_settings() -> None:
    import torch._dynamo.config as dc

    dc.automatic_dynamic_shapes = False  # every new shape gets its own static graph, as in the reference
    for k in ("recompile_limit", "cache_size_limit"):
        if hasattr(dc, k):
            setattr(dc, k, 64)
    for k in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dc, k):
            setattr(dc, k, 1024)

