"""Data-parallel training on packer shards: one process per GPU, each fed by its PackedSampler rank (issue 20).

    # 1, 2, 4, 8 GPUs, one after the other, NCCL (NVLink multicast off), the 124M model,
    # 65,536 slots per GPU per step; prints tokens/s, scaling efficiency, loader against resident:
    python bench/ddp_train.py sweep --data BUILD --gpus 1,2,4,8
    # one size by hand (what sweep runs):
    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 8 bench/ddp_train.py train --data BUILD
    # exactness: stop at step 5 on 8 processes, resume on 4, read into the next epoch; check every row
    python bench/ddp_train.py check --data BUILD --world 8,4 --stop 5
    # CPU (CI): gloo, tiny model
    torchrun --standalone --nproc-per-node 2 bench/ddp_train.py train --data BUILD --device cpu --tiny
    python bench/ddp_train.py check --data BUILD --device cpu --tiny --world 4,2 --stop 3

The model is examples/train_gpt.py's GPT (imported from there, not copied):
``--model 124m`` is 12 layers, d 768, 12 heads, vocab rounded up to a
multiple of 64 (GPT-2: 50304), the one-GPU benchmark's model (bench/gpu_train.py at commit 99450b8);
``--tiny`` is 2 layers, d 32. Packed rows with the document mask
(``--attn auto``: flex with packer's BlockMask on CUDA, dense SDPA on CPU),
bf16 autocast on CUDA, fused AdamW, DistributedDataParallel.

``train`` (under torchrun) has two modes:

- **bench** (default): ``--warmup`` steps, then ``--rounds`` of a loader-fed
  window (PackedLoader: ``--workers`` processes per rank, pin_memory,
  non_blocking copies) and a GPU-resident window replaying the very batches
  the loader window delivered, already on the device: the same rows, the
  same work, no data path. Per rank: each window's time (synchronized at its
  ends), the seconds the loop waited in ``next()``; globally: useful tokens/s
  (useful = non-padding tokens, as bench/gpu_train.py did) = tokens of all ranks
  / the slowest rank's time.
- **steps** (``--steps N``): a plain training loop to global step N, across
  epochs; ``--save-at K --ckpt F`` saves model, optimizer and the loader
  state at step K (after checking that every rank's state is the same);
  ``--resume`` starts from F, with any world size.

Both record which rows every rank trained at every step (the batch carries
its row indices) and rank 0 checks, against ``PackedSampler.epoch_order``:
every rank ran the same steps; at each step the ranks together read the next
W*B rows of the epoch order, none twice; an epoch that ended was read to its
end (less its last < W*B rows). ``--out`` gets the records and the figures (JSON).
``check`` runs ``train --steps`` twice (stop on W1, resume on W2) and checks
that the two together read every row of the epoch order once.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import Dataset

from packer import PackedDataset, PackedLoader, PackedSampler, collate

from ddp_runs import cmd_check, cmd_sweep, verify  # bench/ddp_runs.py: the drivers and the exactness check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(REPO, "examples") not in sys.path:
    sys.path.append(os.path.join(REPO, "examples"))  # examples/ is no package
import train_gpt as ex  # noqa: E402  examples/train_gpt.py: GPTConfig, GPT, make_mask, token_losses

MODELS = {"124m": (768, 12, 12), "tiny": (32, 2, 2)}  # d_model, layers, heads


# -- data -----------------------------------------------------------------------


class RowIds(Dataset):
    """A PackedDataset whose batches also say which rows they hold (to check what every rank read)."""

    def __init__(self, ds: PackedDataset):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitems__(self, indices):
        return self.ds.__getitems__(indices), [int(i) for i in indices]


def collate_rows(item) -> dict:
    """packer.collate, plus ``rows`` (the B row indices) and ``useful`` (non-padding tokens), as ints:
    Python objects travel from a worker pickled, with no extra shared-memory block."""
    rows, idx = item
    batch = collate(rows)
    batch["rows"] = idx
    batch["useful"] = int(rows.batch["_doc_lens"].sum())
    return batch


def epochs(loader: PackedLoader, sampler: PackedSampler):
    """(epoch, batch), endlessly: the loader's epoch, then the next one."""
    while True:
        n = 0
        for batch in loader:
            n += 1
            yield sampler.epoch, batch
        if n == 0 and sampler.state_dict()["position"] == 0:
            raise SystemExit(f"error: an epoch holds fewer than world_size x batch_size = "
                             f"{sampler.world_size} x {loader.batch_size} rows")
        sampler.set_epoch(sampler.epoch + 1)


# -- processes ------------------------------------------------------------------


def setup(device: str) -> tuple[int, int, torch.device]:
    """rank, world size and this rank's device; joins the process group when launched by torchrun."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    dev = torch.device(device)
    if dev.type == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(dev)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (device docs)
    if world > 1:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", device_id=dev if dev.type == "cuda" else None)
    return rank, world, dev


def gather(obj) -> list:
    """obj of every rank, in rank order (every rank gets the list)."""
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# -- training -------------------------------------------------------------------


def build_model(args, vocab: int, dev: torch.device):
    d, layers, heads = MODELS["tiny" if args.tiny else args.model]
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    raw = ex.GPT(ex.GPTConfig(-(-vocab // 64) * 64, d, layers, heads)).to(dev)
    if args.compile:
        raw.compile_blocks()
    model = raw
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(raw.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95), fused=dev.type == "cuda")
    return model, raw, opt


def train_step(model, opt, batch: dict, attn: str, dev: torch.device) -> torch.Tensor:
    """One optimizer step on a (B, L) batch; returns the loss (a device scalar: no host sync)."""
    ids = batch["input_ids"].to(dev, non_blocking=True)
    labels = batch["labels"].to(dev, non_blocking=True)
    pos = batch["position_ids"].to(dev, non_blocking=True)
    mask = ex.make_mask(batch, attn, dev)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        logits = model(ids, pos, mask)
    n = (labels[:, 1:] != -100).sum()
    loss = ex.token_losses(logits, labels).sum() / n.clamp(min=1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.detach()


def to_device(batch: dict, dev: torch.device) -> dict:
    return {k: v.to(dev, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def run_bench(args, it, model, opt, attn, dev) -> tuple[list, dict]:
    """Warm-up, then rounds of (loader window, resident window). Returns this rank's
    records [(epoch, rows)] per loader-fed step and its timings (seconds, tokens)."""
    records, losses = [], []
    t = {"loader_s": [], "resident_s": [], "wait_s": [], "useful": []}
    for _ in range(args.warmup):
        e, b = next(it)
        records.append((e, b["rows"]))
        losses.append(train_step(model, opt, b, attn, dev))
    sync(dev)
    for _ in range(args.rounds):
        kept, wait, useful = [], 0.0, 0
        a = time.perf_counter()
        for _ in range(args.window):
            w = time.perf_counter()
            e, b = next(it)
            wait += time.perf_counter() - w
            b = to_device(b, dev)
            kept.append(b)
            records.append((e, b["rows"]))
            useful += b["useful"]
            losses.append(train_step(model, opt, b, attn, dev))
        sync(dev)
        t["loader_s"].append(time.perf_counter() - a)
        t["wait_s"].append(wait)
        t["useful"].append(useful)
        a = time.perf_counter()
        for b in kept:  # the same batches, already on the device
            losses.append(train_step(model, opt, b, attn, dev))
        sync(dev)
        t["resident_s"].append(time.perf_counter() - a)
        del kept
    t["peak_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2) if dev.type == "cuda" else None
    t["loss_first"], t["loss_last"] = float(losses[0]), float(losses[-1])
    t["loss_finite"] = bool(torch.isfinite(torch.stack(losses)).all())
    return records, t


def run_steps(args, it, model, raw, opt, loader, start_step: int, attn, dev, rank: int) -> list:
    """Train from start_step to args.steps; save at args.save_at. Returns [(epoch, rows)] per step."""
    records, step = [], start_step
    while step < args.steps:
        e, b = next(it)
        loss = train_step(model, opt, b, attn, dev)
        records.append((e, b["rows"]))
        step += 1
        if step == args.save_at:
            states = gather(loader.state_dict())
            if any(s != states[0] for s in states):
                raise SystemExit(f"error: ranks disagree on the loader state at step {step}: {states}")
            if rank == 0:
                torch.save({"model": raw.state_dict(), "opt": opt.state_dict(), "data": states[0], "step": step,
                            "world": len(states)}, args.ckpt)
        if not torch.isfinite(loss):
            raise SystemExit(f"error: loss is not finite at step {step}")
    return records


# -- the worker (under torchrun) ------------------------------------------------


def cmd_train(args) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 PID: every thread's stack (a hung rank)
    rank, world, dev = setup(args.device)
    ds = PackedDataset(args.data)
    B = args.batch_size or max(1, args.slots // ds.seq_len)
    attn = args.attn if args.attn != "auto" else ("flex" if dev.type == "cuda" else "dense")
    sampler = PackedSampler(ds, seed=args.seed, rank=rank, world_size=world)
    kw = {"prefetch_factor": 2, "persistent_workers": True} if args.workers else {}
    loader = PackedLoader(RowIds(ds), B, sampler=sampler, collate_fn=collate_rows, num_workers=args.workers,
                          pin_memory=dev.type == "cuda", drop_last=True, **kw)
    digests = gather((len(ds), sampler.state_dict()["order_digest"]))
    if any(d != digests[0] for d in digests):
        raise SystemExit(f"error: ranks see different data or orders: {digests}")
    model, raw, opt = build_model(args, ds.vocab_size, dev)
    step, starts = 0, {}
    if args.resume:
        ck = torch.load(args.ckpt, map_location=dev, weights_only=False)
        raw.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(ck["data"])
        step, starts = ck["step"], {ck["data"]["epoch"]: ck["data"]["position"]}
        if rank == 0:
            print(f"resumed at step {step} (saved on {ck['world']} ranks), epoch {sampler.epoch}, "
                  f"position {ck['data']['position']}, on {world} ranks", flush=True)
    it = epochs(loader, sampler)
    wall = time.perf_counter()
    if args.steps:
        records, timing = run_steps(args, it, model, raw, opt, loader, step, attn, dev, rank), {}
    else:
        records, timing = run_bench(args, it, model, opt, attn, dev)
    wall = time.perf_counter() - wall
    # Tear down in order while the process group is alive: the loader's workers, then DDP (its reducer
    # holds the group). Left to interpreter exit, a gloo rank now and then never exited (CPU, 4 ranks).
    it.close()
    loader._iterator = None  # persistent workers: shut down now (DataLoader's own __del__ does it)
    del model, raw, opt, it
    gc.collect()
    everyone = gather({"records": records, "timing": timing, "wall_s": wall})
    exact = report(args, everyone, ds, world, B, attn, starts, step, dev) if rank == 0 else True
    if dist.is_initialized():
        dist.barrier()  # every rank reaches the end: none is left waiting in a collective
        dist.destroy_process_group()
    if not exact:
        sys.exit(1)


def report(args, everyone: list[dict], ds, world: int, B: int, attn: str, starts: dict, start_step: int, dev) -> bool:
    """Rank 0: checks the rows every rank read, prints the figures, writes --out; True if exact."""
    orders = PackedSampler(ds, seed=args.seed)
    records = [p["records"] for p in everyone]
    problems = verify(records, orders.epoch_order, starts, world, B)
    out = {"world": world, "batch_size": B, "seq_len": ds.seq_len, "attn": attn, "device": str(dev),
           "model": "tiny" if args.tiny else args.model, "compile": args.compile, "workers": args.workers,
           "start_step": start_step, "starts": {str(k): v for k, v in starts.items()},
           "epoch_rows": orders.num_samples, "exact": not problems, "problems": problems[:20],
           "records": records, "steps_per_rank": [len(r) for r in records]}
    out["torch"] = torch.__version__
    if dev.type == "cuda":
        out.update(gpu=torch.cuda.get_device_name(dev), cuda=torch.version.cuda,
                   nccl=".".join(map(str, torch.cuda.nccl.version())), nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"))
    print(f"exactness on {world} ranks, {len(records[0])} steps each: "
          + ("ok" if not problems else f"{len(problems)} problem(s): " + "; ".join(problems[:3])), flush=True)
    if not args.steps:
        out.update(figures(everyone, args.window))
        print(f"{world} rank(s): loader-fed {out['useful_tok_s']:,.0f} useful tok/s, GPU-resident "
              f"{out['resident_tok_s']:,.0f}; loader/resident worst rank {out['loader_vs_resident_min']:.3f}; "
              f"waited in next() at most {out['wait_ms_per_step_max']:.2f} ms/step", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f)
    return not problems


def figures(everyone: list[dict], window: int) -> dict:
    """Global useful tokens/s (all ranks' tokens over the slowest rank's time) and every rank's data wait."""
    ts = [p["timing"] for p in everyone]
    useful = sum(sum(t["useful"]) for t in ts)
    loader_s = max(sum(t["loader_s"]) for t in ts)
    resident_s = max(sum(t["resident_s"]) for t in ts)
    per_rank = [sum(t["resident_s"]) / sum(t["loader_s"]) for t in ts]  # > 1: the loader-fed window was faster
    steps = window * len(ts[0]["loader_s"])
    return {
        "useful_tok_s": useful / loader_s, "resident_tok_s": useful / resident_s,
        "loader_vs_resident": resident_s / loader_s, "loader_vs_resident_per_rank": per_rank,
        "loader_vs_resident_min": min(per_rank), "timed_steps": steps,
        "wait_ms_per_step_per_rank": [1e3 * sum(t["wait_s"]) / steps for t in ts],
        "wait_ms_per_step_max": 1e3 * max(sum(t["wait_s"]) for t in ts) / steps,
        "loss_first": ts[0]["loss_first"], "loss_last": ts[0]["loss_last"],
        "loss_finite": all(t["loss_finite"] for t in ts), "timing_per_rank": ts,
    }


def parse(argv=None):
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--data", action="append", required=True, help="build folder (repeat to concatenate builds)")
    shared.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    shared.add_argument("--model", choices=sorted(MODELS), default="124m")
    shared.add_argument("--tiny", action="store_true", help="--model tiny (CPU tests)")
    shared.add_argument("--slots", type=int, default=65536, help="token slots per rank per step (B = slots // seq_len)")
    shared.add_argument("--batch-size", type=int, help="rows per rank per step (overrides --slots)")
    shared.add_argument("--workers", type=int, default=4, help="DataLoader worker processes per rank")
    shared.add_argument("--attn", choices=("auto", "flex", "varlen", "dense"), default="auto")
    shared.add_argument("--compile", action="store_true", help="compile every block (torch.compile, dynamic=False)")
    shared.add_argument("--seed", type=int, default=0)
    shared.add_argument("--lr", type=float, default=1e-3)
    shared.add_argument("--warmup", type=int, default=8, help="loader-fed steps before timing (compiles, NCCL set-up)")
    shared.add_argument("--window", type=int, default=20, help="steps per timed window")
    shared.add_argument("--rounds", type=int, default=2, help="(loader window, resident window) pairs")
    shared.add_argument("--timeout", type=float, default=None, help="seconds for each torchrun launch (drivers)")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", parents=[shared], help="one rank (run it under torchrun)")
    t.add_argument("--steps", type=int, default=0, help="steps mode: train to this global step (0: bench mode)")
    t.add_argument("--save-at", type=int, default=0)
    t.add_argument("--ckpt")
    t.add_argument("--resume", action="store_true")
    t.add_argument("--out", help="JSON of the run (rank 0)")
    s = sub.add_parser("sweep", parents=[shared], help="train on 1, 2, 4, 8 processes; the scaling table")
    s.add_argument("--gpus", default="1,2,4,8")
    s.add_argument("--out-dir", default="bench_out/ddp")
    c = sub.add_parser("check", parents=[shared], help="stop on W1 ranks, resume on W2, check every row")
    c.add_argument("--world", default="8,4", help="W1,W2")
    c.add_argument("--stop", type=int, default=5, help="steps on W1 before the stop")
    c.add_argument("--into-next", type=int, default=2, help="steps of the next epoch the resumed run reads")
    c.add_argument("--out-dir", default="bench_out/ddp")
    args = p.parse_args(argv)
    if args.cmd == "train" and (args.save_at or args.resume) and not args.ckpt:
        p.error("--save-at and --resume need --ckpt")
    return args


def main(argv=None) -> None:
    args = parse(argv)
    {"train": cmd_train, "sweep": cmd_sweep, "check": cmd_check}[args.cmd](args)


if __name__ == "__main__":
    main()
