"""What a run writes: the line of each finished task, the Markdown tables, the JSON, the environment."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time

import numpy as np
import torch

from .config import Cfg
from .steps import n_params
from .tasks import Run


def label(t: dict) -> str:
    if t["task"] == "train":
        return f"{t['corpus']} {t['mode']} {t['seq']} {t['var']}"
    return f"{t['task']} {t['corpus']} {t['mode']} {t['seq']}"


def one_line(r: dict) -> str:
    head = label(r)
    if r.get("status") != "ok":
        return f"{head}: {r.get('status')} ({r.get('reason') or r.get('error')})"
    if r["task"] == "train":
        return (f"{head}: {r['useful_tok_s'] / 1e3:,.0f} useful ktok/s, pad {r['pad_pct']:.1f}%, MFU {r['mfu_pct']:.1f}%, "
                f"{r['step_ms_median']:.0f} ms/step, peak {r['peak_gib']} GiB, warm-up {r['warmup_s']} s, "
                f"loss {r['loss_first']}->{r['loss_last']}")
    if r["task"] == "loader":
        return (f"{head}: loader/resident {r['loader_over_resident']:.3f} (phases {r['per_phase_ratio']}), "
                f"loader alone {r['loader_alone_batches_s']} batches/s vs {r['gpu_steps_s']} steps/s, "
                f"main-thread wait {r['main_thread']['wait_ms']} ms")
    return f"{head}: all_pass={r['all_pass']}"



def table_rows(run: Run) -> list[dict]:
    rows = []
    for r in run.results:
        if r["task"] == "train" and r.get("status") == "ok":
            rows.append({**{k: r[k] for k in ("corpus", "mode", "seq", "var")}, **r})
        if r["task"] == "loader" and r.get("status") == "ok":
            for name in ("loader", "resident"):
                p = r["phases"][name]
                rows.append({"corpus": r["corpus"], "mode": r["mode"], "seq": r["seq"], "var": f"D {name}",
                             **p, "peak_gib": r["peak_gib"]})
    for row in rows:
        grp = [x for x in rows if (x["corpus"], x["mode"], x["seq"]) == (row["corpus"], row["mode"], row["seq"])]
        for base in ("A", "A2", "C"):
            ref = next((x for x in grp if x["var"] == base), None)
            row[f"x_{base}"] = row["useful_tok_s"] / ref["useful_tok_s"] if ref else None
    return rows


def markdown(run: Run) -> str:
    env = run.env
    lines = [f"torch {env.get('torch')}, {env.get('gpu')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, "
             f"triton {env.get('triton')}, python {env.get('python')}; plan {run.cfg.plan}; "
             f"{run.cfg.slots} slots/step, {run.cfg.steps} timed steps after {run.cfg.warmup} (eager) / "
             f"{run.cfg.cwarmup} (compiled) warm-up; model {run.mc}",
             "",
             "| corpus | mode | seq | var | useful ktok/s | slots ktok/s | pad % | peak GiB | MFU % | MFU spec % | "
             "step ms | x A | x A2 | x C |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(x, p=2):
        return "-" if x is None else f"{x:.{p}f}"

    for r in table_rows(run):
        lines.append(
            f"| {r['corpus']} | {r['mode']} | {r['seq']} | {r['var']} | {r['useful_tok_s'] / 1e3:,.0f} | "
            f"{r['slots_tok_s'] / 1e3:,.0f} | {r['pad_pct']:.1f} | {f(r.get('peak_gib'), 1)} | {r['mfu_pct']:.1f} | "
            f"{r['mfu_spec_pct']:.1f} | {r['step_ms_median']:.0f} | {f(r['x_A'])} | {f(r['x_A2'])} | {f(r['x_C'])} |")
    for r in run.results:
        if r["task"] == "correct" and r.get("status") == "ok":
            lines += ["", f"Correctness ({r['mode']}, rows {r['rows']} of web {r['seq']}, pieces {r['pieces_per_row']}):", "",
                      "| variant | dtype | logits rel err | max token-loss diff | grads rel err | worst param | status |",
                      "|---|---|---:|---:|---:|---:|---|"]
            for c in r["checks"]:
                def g(k):
                    v = c.get(k)
                    return "-" if v is None else f"{v:.2e}"

                lines.append(f"| {c['variant']} | {c['dtype']} | {g('logits_rel_err')} | {g('max_token_loss_diff')} | "
                             f"{g('grads_rel_err')} | {g('grads_worst_param_rel_err')} | {c['status']} |")
        if r["task"] == "loader" and r.get("status") == "ok":
            lines += ["", f"Loader ({r['mode']}, {r['corpus']} {r['seq']}, {r['attention']}, {r['workers']} workers, "
                      f"pin_memory {r['pin_memory']}): loader/resident = {r['loader_over_resident']:.3f} "
                      f"(phases {r['per_phase_ratio']}); loader alone {r['loader_alone_batches_s']} batches/s = "
                      f"{r['loader_headroom']}x the GPU's {r['gpu_steps_s']} steps/s; main thread blocked in next() "
                      f"{r['main_thread']['wait_ms']} ms per {run.cfg.loader_steps} steps; rows identical: {r['rows_identical']}"]
    lines += ["", "Targets:"] + [f"- {t}" for t in targets(run)]
    bad = [r for r in run.results if r.get("status") != "ok"]
    if bad:
        lines += ["", "Not run or failed:"] + [f"- {label(r)}: {r['status']}: {r.get('reason') or r.get('error')}" for r in bad]
    return "\n".join(lines) + "\n"


def targets(run: Run) -> list[str]:
    rows = table_rows(run)
    s = run.cfg.seqs[0]
    out = []

    def get(corpus_, mode, seq, var):
        return next((r for r in rows if (r["corpus"], r["mode"], r["seq"], r["var"]) == (corpus_, mode, seq, var)), None)

    for mode in ("eager", "compiled"):
        d = get("web", mode, s, "D")
        if d and d.get("x_A"):
            out.append(f"web {mode} {s}: D / A = {d['x_A']:.2f} (target >= 2.4): {'PASS' if d['x_A'] >= 2.4 else 'MISS'}")
        if d and d.get("x_C"):
            out.append(f"web {mode} {s}: D / C = {d['x_C']:.3f} (target >= 0.97): {'PASS' if d['x_C'] >= 0.97 else 'MISS'}")
    comp = [r for r in rows if r["mode"] == "compiled" and r["var"] == "D"]
    for r in comp:
        out.append(f"{r['corpus']} compiled {r['seq']} D: MFU {r['mfu_pct']:.1f}% of 790 TFLOP/s measured "
                   f"({r['mfu_spec_pct']:.1f}% of 989 spec) (target >= 40%): {'PASS' if r['mfu_pct'] >= 40 else 'MISS'}")
    for r in run.results:
        if r["task"] == "loader" and r.get("status") == "ok":
            x = r["loader_over_resident"]
            out.append(f"loader {r['mode']} {r['seq']}: loader-fed / GPU-resident = {x:.3f} (target >= 0.98): "
                       f"{'PASS' if x >= 0.98 else 'MISS'}")
        if r["task"] == "correct" and r.get("status") == "ok":
            out.append(f"correctness {r['mode']}: {'PASS' if r['all_pass'] else 'FAIL'}")
    return out or ["(nothing measured yet)"]


def write_outputs(run: Run) -> None:
    os.makedirs(run.cfg.out_dir, exist_ok=True)
    base = os.path.join(run.cfg.out_dir, f"gpu_train_{run.cfg.plan}")
    doc = {"env": run.env, "cfg": run.cfg.__dict__, "model": run.mc.__dict__ if run.mc else None,
           "n_params": n_params(run.mc) if run.mc else None, "prep": {f"{k[0]}-{k[1]}": c.prep for k, c in run.corpora.items()},
           "results": run.results, "wall_s": round(time.perf_counter() - run.t0, 1)}
    with open(base + ".json.tmp", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(base + ".json.tmp", base + ".json")
    with open(base + ".md", "w") as f:
        f.write(markdown(run))


def environment(cfg: Cfg) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": cfg.device,
           "cuda": torch.version.cuda, "numpy": np.__version__}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if cfg.cuda:
        env["gpu"] = torch.cuda.get_device_name()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        env["cudnn"] = torch.backends.cudnn.version()
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            env["nvidia_smi"] = q.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        env["gpu"], env["cudnn"] = "none (CPU)", None
    return env

