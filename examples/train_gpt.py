"""Train a small GPT on packer shards, in plain PyTorch.

    packer build corpus/ out/ --seq-len 1024 --tokenizer gpt2/tokenizer.json
    python examples/train_gpt.py --data out/ --steps 200            # GPU: flex attention, packer's BlockMask
    python examples/train_gpt.py --data out/ --steps 20 --attn dense --d-model 64 --layers 2   # CPU

Every packed row holds several documents; attention is document-causal (a
token sees only earlier tokens of its own document piece), positions restart
per piece (RoPE reads ``position_ids``), and the labels are -100 where a
prediction would cross a boundary. Three ways to apply the mask (``--attn``):

- ``flex``: ``flex_attention`` with a ``BlockMask`` (compiled on CUDA; the
  default there: the fastest correct path measured, docs/benchmarks.md);
- ``varlen``: ``torch.nn.attention.varlen.varlen_attn`` over the flattened
  batch with ``cu_seqlens`` (CUDA);
- ``dense``: SDPA with a (B, 1, L, L) boolean mask (anywhere; the CPU default).

``--compile`` compiles every block with ``torch.compile`` (static shapes;
varlen stays outside the graph). bench/gpu_train.py at commit 99450b8 trained this same model.

``--ckpt PATH`` saves model, optimizer and data-loader state every
``--save-every`` steps; ``--resume`` continues from it and reads exactly
the rows the uninterrupted run would have read.

Several GPUs: ``torchrun --nproc_per_node 8 examples/train_gpt.py --data out/``
(DistributedDataParallel; each rank reads a disjoint share of every epoch).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from packer import PackedDataset, PackedLoader, PackedSampler, block_mask, dense_mask


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    rope_base: float = 10000.0


@dataclass
class Mask:
    """How attention is restricted; built once per batch, shared by all layers."""

    kind: str  # "varlen" | "flex" | "dense" | "causal" (no document mask: a control)
    dense: torch.Tensor | None = None  # (B, 1, L, L) bool
    block: object | None = None  # flex BlockMask
    cu_seqlens: torch.Tensor | None = None  # (S + 1,) int32
    max_seqlen: int = 0


def make_mask(batch: dict, kind: str, device: torch.device) -> Mask:
    if kind == "dense":
        return Mask(kind, dense=dense_mask(batch["document_ids"].to(device)))
    if kind == "flex":
        return Mask(kind, block=block_mask(batch["document_ids"].to(device), compile=device.type == "cuda"))
    if kind == "varlen":
        return Mask(kind, cu_seqlens=batch["cu_seqlens"].to(device), max_seqlen=int(batch["max_seqlen"]))
    if kind == "causal":
        return Mask(kind)
    raise ValueError(f"unknown attention {kind!r}")


# Why --attn auto picks what it picks (printed once; figures: docs/benchmarks.md "GPU training").
WHY_DEFAULT = {
    "flex": "fastest correct path on a GPU: document-masked flex with packer's BlockMask ran at the speed of "
            "unmasked packed rows, at or above varlen_attn, on an H200",
    "dense": "CPU: flex_attention has no backward there and varlen_attn needs CUDA; SDPA with packer's dense mask is exact",
}

_flex = None


def flex(q, k, v, block):
    """flex_attention, compiled once on CUDA (it is slow uncompiled); traced as is inside a compiled block."""
    from torch.nn.attention.flex_attention import flex_attention

    if torch.compiler.is_compiling() or not q.is_cuda:
        return flex_attention(q, k, v, block_mask=block)
    global _flex
    if _flex is None:
        _flex = torch.compile(flex_attention, dynamic=False)
    return _flex(q, k, v, block_mask=block)


@torch.compiler.disable
def varlen(q, k, v, mask: Mask):
    """(B, L, H, D) -> (B, L, H, D), causal within each segment of ``cu_seqlens``.

    Kept out of compiled graphs, so that a batch's segment count and max_seqlen
    never become graph inputs (each new value would recompile a static graph).
    """
    from torch.nn.attention.varlen import varlen_attn

    B, L, H, D = q.shape
    cu, mx = mask.cu_seqlens, mask.max_seqlen
    flat = (t.reshape(B * L, H, D) for t in (q, k, v))
    return varlen_attn(*flat, cu, cu, mx, mx, window_size=(-1, 0)).view(B, L, H, D)  # (-1, 0): causal


def attend(q, k, v, mask: Mask):
    """q, k, v: (B, L, H, D) -> (B, L, H, D)."""
    if mask.kind == "varlen":
        return varlen(q, k, v, mask)
    # SDPA and flex take (B, H, L, D), handed over contiguous: without that, inductor (torch 2.13,
    # CPU) fused RoPE into flex_attention inside a compiled block and returned wrong outputs.
    q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    if mask.kind == "dense":
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense)
    elif mask.kind == "causal":
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif mask.kind == "flex":
        y = flex(q, k, v, mask.block)
    else:
        raise ValueError(f"unknown attention {mask.kind!r}")
    return y.transpose(1, 2)


def rope_angles(position_ids, head_dim: int, base: float):
    """cos and sin of the rotary angles of position_ids (B, L): (B, L, 1, head_dim / 2) each, fp32."""
    inv = base ** (-torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim)
    ang = position_ids[..., None].float() * inv
    return ang.cos()[:, :, None], ang.sin()[:, :, None]


def rope(x, cos, sin):
    """Rotary embedding (rotate-half) of x (B, L, H, D)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d, bias=False))

    def forward(self, x, cos, sin, mask: Mask):
        B, L, d = x.shape
        H = self.cfg.n_heads
        q, k, v = self.qkv(self.norm1(x)).view(B, L, 3, H, d // H).unbind(2)
        y = attend(rope(q, cos, sin), rope(k, cos, sin), v, mask)
        x = x + self.proj(y.reshape(B, L, d))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def compile_blocks(self) -> GPT:
        """Compile every block with static shapes (``--compile``); the lm_head and loss stay eager."""
        for blk in self.blocks:
            blk.compile(dynamic=False)
        return self

    def forward(self, input_ids, position_ids, mask: Mask):
        """(B, L) ids and positions -> (B, L, vocab) logits (lm_head tied to the embedding)."""
        x = self.embed(input_ids)
        cos, sin = rope_angles(position_ids, self.cfg.d_model // self.cfg.n_heads, self.cfg.rope_base)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return F.linear(self.norm(x), self.embed.weight)


def token_losses(logits, labels):
    """Per-slot loss of predicting labels[t + 1] from logits[t]: (B, L - 1), 0 where ignored.

    The HF convention: labels are not shifted in the batch, the loss shifts
    (the labels, not the logits: a slice of the logits would be a copy of them).
    """
    B, L, V = logits.shape
    targets = F.pad(labels[:, 1:], (0, 1), value=-100)
    return F.cross_entropy(
        logits.reshape(-1, V).float(), targets.reshape(-1), ignore_index=-100, reduction="none"
    ).view(B, L)[:, :-1]


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", action="append", required=True, help="build folder (repeat to mix builds)")
    p.add_argument("--weights", type=float, nargs="+", help="mixing weights, one per --data")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--attn", choices=("auto", "varlen", "flex", "dense"), default="auto")
    p.add_argument("--compile", action="store_true", help="torch.compile every block")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt", help="checkpoint file")
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args(argv)


def setup(args) -> tuple[torch.device, int, int]:
    """(device, rank, world size); under torchrun, one process per GPU (or per CPU process with gloo)."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = torch.device(args.device)
    if world > 1:
        import torch.distributed as dist

        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device, rank, world


def resume(args, model, opt, loader, sampler, device) -> int:
    """Restore model, optimizer, data-loader position and RNG from --ckpt; returns the step reached."""
    ck = torch.load(args.ckpt, map_location=device, weights_only=False)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    loader.load_state_dict(ck["data"])
    torch.set_rng_state(ck["rng"])
    print(f"resumed at step {ck['step']}, epoch {sampler.epoch}, row {ck['data']['position']}")
    return ck["step"]


def main(argv=None) -> list[float]:
    """Train; returns the loss of every step run.

    The training loop stays in one piece (over 60 lines) so that a reader sees the whole of it.
    """
    args = parse(argv)
    device, rank, world = setup(args)
    attn = args.attn if args.attn != "auto" else ("flex" if device.type == "cuda" else "dense")
    if args.attn == "auto" and rank == 0:
        print(f"attention: {attn} ({WHY_DEFAULT[attn]})")
    torch.manual_seed(args.seed)  # the same initial weights on every rank

    ds = PackedDataset(args.data)
    # Each rank reads its own disjoint, equal share of every epoch.
    sampler = PackedSampler(ds, weights=args.weights, seed=args.seed, rank=rank, world_size=world)
    loader = PackedLoader(ds, args.batch_size, sampler=sampler, num_workers=args.workers,
                          pin_memory=device.type == "cuda", drop_last=True,
                          persistent_workers=args.workers > 0)

    raw = GPT(GPTConfig(ds.vocab_size, args.d_model, args.layers, args.heads)).to(device)
    if args.compile:
        raw.compile_blocks()
    model = torch.nn.parallel.DistributedDataParallel(raw) if world > 1 else raw
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    step = 0
    if args.resume and args.ckpt and os.path.exists(args.ckpt):
        step = resume(args, raw, opt, loader, sampler, device)

    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    losses: list[float] = []
    t0, tokens = time.perf_counter(), 0
    while step < args.steps:
        for batch in loader:
            ids = batch["input_ids"].to(device, non_blocking=True)
            labels = batch["labels"].to(device, non_blocking=True)
            pos = batch["position_ids"].to(device, non_blocking=True)
            mask = make_mask(batch, attn, device)
            with amp:
                logits = model(ids, pos, mask)
            tl = token_losses(logits, labels)
            n = (labels[:, 1:] != -100).sum()
            loss = tl.sum() / n.clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            losses.append(loss.item())
            tokens += int(n)
            if rank == 0 and (step % args.log_every == 0 or step == args.steps):
                dt = time.perf_counter() - t0
                print(f"step {step} loss {losses[-1]:.4f} ({attn}) {tokens * world / dt:,.0f} trained tokens/s")
            if rank == 0 and args.ckpt and args.save_every and step % args.save_every == 0:
                # The loader state is global (a position in the epoch order): one file serves every rank.
                torch.save({"model": raw.state_dict(), "opt": opt.state_dict(), "data": loader.state_dict(),
                            "rng": torch.get_rng_state(), "step": step}, args.ckpt)
            if step >= args.steps:
                break
        else:
            sampler.set_epoch(sampler.epoch + 1)  # the epoch ran out: the next one
    if world > 1:
        torch.distributed.destroy_process_group()
    if losses and not all(math.isfinite(x) for x in losses):
        raise SystemExit("loss is not finite")
    return losses


if __name__ == "__main__":
    main()
