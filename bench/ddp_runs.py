"""The drivers of bench/ddp_train.py (``sweep``, ``check``: several torchrun launches) and its exactness check.

``verify`` is pure (lists in, problems out): the worker runs it on rank 0
and the tests run it on what the workers recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import torch

from packer import PackedDataset, PackedSampler

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_train.py")

# -- exactness ------------------------------------------------------------------


def verify(records: list[list], order_of, starts: dict[int, int], world: int, B: int) -> list[str]:
    """Problems (none: exact) with the rows that ranks read.

    records[r]: rank r's [(epoch, rows)] per step, in step order; order_of(e): epoch e's order
    (all ranks); starts[e]: the position in epoch e where this run started (0 if absent).
    """
    problems = []
    if len({len(r) for r in records}) != 1:
        return [f"ranks ran different numbers of steps: {[len(r) for r in records]}"]
    done = {}
    for j, step in enumerate(zip(*records)):
        ep = {e for e, _ in step}
        if len(ep) != 1:
            problems.append(f"step {j}: ranks are in different epochs {sorted(ep)}")
            continue
        e = ep.pop()
        i = done.get(e, 0)
        a = starts.get(e, 0) + i * world * B
        read = [x for _, rows in step for x in rows]
        want = order_of(e)[a:a + world * B].tolist()
        if len(set(read)) != len(read) or sorted(read) != sorted(want):
            problems.append(f"step {j} (epoch {e}): ranks read {sorted(read)[:8]}..., the order has {sorted(want)[:8]}...")
        done[e] = i + 1
    for e in sorted(done)[:-1]:  # epochs that ended: every rank read its whole share (drop_last: whole batches)
        want = (len(order_of(e)) - starts.get(e, 0)) // world // B
        if done[e] != want:
            problems.append(f"epoch {e} ended after {done[e]} steps, its rows make {want} (world {world}, batch {B})")
    return problems



# -- drivers: several torchrun launches ----------------------------------------

FORWARD = ("data", "device", "model", "slots", "batch_size", "workers", "attn", "seed", "lr", "warmup", "window", "rounds")


def forwarded(args) -> list[str]:
    """The shared options of ``args`` as ``train`` arguments."""
    out = []
    for k in FORWARD:
        v = getattr(args, k)
        for x in (v if isinstance(v, list) else [v]):
            if x is not None:
                out += [f"--{k.replace('_', '-')}", str(x)]
    return out + ["--tiny"] * args.tiny + ["--compile"] * args.compile


def torchrun(n: int, argv: list[str], timeout: float | None) -> int:
    """``torchrun --standalone --nproc-per-node n bench/ddp_train.py train ARGV``; its exit code."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           TRAIN, "train", *argv]
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")  # NVLink multicast off, as the device docs require
    env.setdefault("OMP_NUM_THREADS", "1")  # what torchrun sets for n > 1: the same for n = 1, like for like
    print("$ NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=" + env["OMP_NUM_THREADS"] + " torchrun " + " ".join(cmd[3:]), flush=True)
    proc = subprocess.Popen(cmd, env=env)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # torchrun ends its ranks on SIGTERM (they run in sessions of their own: a group kill misses them)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(f"error: {n} processes ran past {timeout} s (a rank waiting forever in a collective?)", flush=True)
        return 124


def cmd_sweep(args) -> None:
    os.makedirs(args.out_dir, exist_ok=True)
    sizes = [int(x) for x in args.gpus.split(",")]
    have = torch.cuda.device_count() if args.device == "cuda" else max(sizes)
    rows, failed = [], []
    for n in sizes:
        if n > have:
            print(f"not run: {n} processes, {have} GPU(s) visible", flush=True)
            continue
        path = os.path.join(args.out_dir, f"ddp_{n}.json")
        if os.path.exists(path):
            os.remove(path)
        rc = torchrun(n, forwarded(args) + ["--out", path], args.timeout)
        if rc != 0 or not os.path.exists(path):
            failed.append(n)
            continue
        with open(path) as f:
            r = json.load(f)
        r.pop("records")
        rows.append(r)
    one = next((r for r in rows if r["world"] == 1), None)
    for r in rows:
        r["efficiency"] = r["useful_tok_s"] / (r["world"] * one["useful_tok_s"]) if one else None
        r["resident_efficiency"] = r["resident_tok_s"] / (r["world"] * one["resident_tok_s"]) if one else None
    lines = ["| GPUs | useful tok/s (loader-fed) | per GPU | efficiency vs 1 | GPU-resident tok/s | resident efficiency "
             "| loader/resident, worst rank | max wait in next(), ms/step | rows exact |", "|" + "---|" * 9]
    for r in rows:
        eff = f"{r['efficiency']:.3f}" if one else "-"
        reff = f"{r['resident_efficiency']:.3f}" if one else "-"
        lines.append(f"| {r['world']} | {r['useful_tok_s']:,.0f} | {r['useful_tok_s'] / r['world']:,.0f} | {eff} | "
                     f"{r['resident_tok_s']:,.0f} | {reff} | {r['loader_vs_resident_min']:.3f} | "
                     f"{r['wait_ms_per_step_max']:.2f} | {'yes' if r['exact'] else 'NO'} |")
    print("\n".join(lines))
    with open(os.path.join(args.out_dir, "ddp_sweep.json"), "w") as f:
        json.dump({"runs": rows, "failed": failed, "argv": sys.argv}, f, indent=1)
    with open(os.path.join(args.out_dir, "ddp_sweep.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if failed:
        sys.exit(f"failed: {failed} processes")


def cmd_check(args) -> None:
    """Stop at step --stop on W1 ranks, resume on W2 and read --into-next steps of the next epoch;
    then check both runs together against the epoch order."""
    w1, w2 = (int(x) for x in args.world.split(","))
    os.makedirs(args.out_dir, exist_ok=True)
    ckpt, a_path, b_path = (os.path.join(args.out_dir, x) for x in ("ddp_check.pt", "check_a.json", "check_b.json"))
    ds = PackedDataset(args.data)
    B = args.batch_size or max(1, args.slots // ds.seq_len)
    order = PackedSampler(ds, seed=args.seed).epoch_order(0)
    pos = args.stop * B * w1
    left = (len(order) - pos) // w2 // B  # the steps W2 ranks have left in epoch 0
    if args.stop < 1 or left < 1:
        sys.exit(f"error: --stop {args.stop} leaves {left} steps of epoch 0 to the resumed run "
                 f"({len(order)} rows, batch {B}, world {w1} then {w2})")
    common = forwarded(args) + ["--ckpt", ckpt]
    if torchrun(w1, common + ["--steps", str(args.stop), "--save-at", str(args.stop), "--out", a_path], args.timeout):
        sys.exit(f"error: the first run ({w1} processes) failed")
    total = args.stop + left + args.into_next
    if torchrun(w2, common + ["--steps", str(total), "--resume", "--out", b_path], args.timeout):
        sys.exit(f"error: the resumed run ({w2} processes) failed")
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    problems = list(a["problems"]) + list(b["problems"])
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)["data"]
    if saved["position"] != pos:
        problems.append(f"the saved position is {saved['position']}, {args.stop} steps of {w1} x {B} rows are {pos}")
    first = [x for rank in a["records"] for e, rows in rank for x in rows if e == 0]
    rest = [x for rank in b["records"] for e, rows in rank for x in rows if e == 0]
    both = first + rest
    if len(set(both)) != len(both):
        problems.append(f"{len(both) - len(set(both))} row(s) of epoch 0 read twice")
    if sorted(both) != sorted(order[:pos + left * w2 * B].tolist()):
        problems.append("the rows read in epoch 0 are not the first rows of its order")
    nxt = {len([s for s in rank if s[0] == 1]) for rank in b["records"]}
    if nxt != {args.into_next}:
        problems.append(f"steps into epoch 1 per rank: {sorted(nxt)}, expected {args.into_next}")
    print(f"check: {args.stop} steps on {w1} ranks (rows 0..{pos - 1} of the order), resumed on {w2} ranks for "
          f"{left} steps to the end of epoch 0 ({len(order) - pos - left * w2 * B} of {len(order)} rows left unread: "
          f"< world x batch) and {args.into_next} into epoch 1: "
          + ("exact" if not problems else f"{len(problems)} problem(s): " + "; ".join(problems[:5])), flush=True)
    if problems:
        sys.exit(1)
