"""A packed batch's rows split by kind, for packer's attention (packer.train.hf).

A row that holds one document from slot 0 to slot T-1 needs no document mask:
plain causal attention is exact for it, and SDPA's dense causal kernel (cuDNN
on Hopper) runs it faster than any varlen kernel. On web-like lengths about
half the rows of a 2048-slot build are such rows, holding about 60% of the
attention work. The other rows go through a varlen kernel.

Each kernel wants its rows side by side, and a batch's rows come in the
sampler's order, so q, k and v are regrouped (one-document rows first) in the
copy that casts them to the kernel dtype anyway (RoPE leaves q and k in fp32
under autocast), and the output goes back to the batch's order in the copy
that joins the two kernels' outputs. Gradients take the same copies in
reverse. Slicing under autograd instead would fill and add a whole-size
gradient for every run of rows: measured slower than one varlen kernel.

Shapes: B rows of T slots, H heads of D; cu_seqlens are int32 offsets over
the flattened slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class RowGroups:
    """Which rows are one document each, and where each run of rows goes.

    ``runs``: (a, b, whole, at) for each maximal run of consecutive rows
    [a, b) of one kind; ``at`` is the run's first row in its group (whole
    rows first, then the others, each in batch order). ``cu``/``mx``: the
    varlen group's cu_seqlens (S+1,) int32 on the device and its longest
    segment.
    """

    B: int
    T: int
    n_whole: int
    runs: list = field(default_factory=list)
    cu: torch.Tensor | None = None
    mx: int = 0

    @classmethod
    def of(cls, cu: torch.Tensor, B: int, T: int) -> "RowGroups":
        """From a batch's cu_seqlens over B*T slots (one host copy)."""
        c = cu.cpu().numpy().astype(np.int64)
        whole = np.ones(B, dtype=bool)
        whole[np.unique(c[c % T != 0] // T)] = False  # a boundary inside a row: several segments
        g = cls(B, T, int(whole.sum()))
        at = {True: 0, False: 0}
        pieces = [np.zeros(1, np.int64)]
        a = 0
        for r in range(1, B + 1):
            if r < B and whole[r] == whole[a]:
                continue
            kind = bool(whole[a])
            g.runs.append((a, r, kind, at[kind]))
            if not kind:  # its segments, moved to where the run sits in the varlen group
                inner = c[(c > a * T) & (c <= r * T)]
                pieces.append(inner - a * T + at[False] * T)
            at[kind] += r - a
            a = r
        part = np.concatenate(pieces)
        if len(part) > 1:
            g.cu = torch.from_numpy(part.astype(np.int32)).to(cu.device)
            g.mx = int(np.diff(part).max())
        return g

    @property
    def mixed(self) -> bool:
        return 0 < self.n_whole < self.B


class Grouped(torch.autograd.Function):
    """(B, H, T, D) -> (whole rows (n_whole*T, H, D), other rows ((B-n_whole)*T, H, D)) in ``dtype``:
    one copy forward (cast, re-layout and regroup together), one backward."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, dtype: torch.dtype, g: RowGroups):
        B, H, T, D = t.shape
        ctx.src, ctx.groups = (t.dtype, t.shape), g
        buf = torch.empty((B, T, H, D), dtype=dtype, device=t.device)
        x = t.transpose(1, 2)
        for a, b, whole, at in g.runs:
            start = at if whole else g.n_whole + at
            buf[start:start + b - a].copy_(x[a:b])
        flat = buf.view(B * T, H, D)
        return flat[:g.n_whole * T], flat[g.n_whole * T:]

    @staticmethod
    def backward(ctx, g_whole, g_other):
        dtype, (B, H, T, D) = ctx.src
        g = ctx.groups
        dev = (g_whole if g_whole is not None else g_other).device
        alloc = torch.empty if g_whole is not None and g_other is not None else torch.zeros
        out = alloc((B, T, H, D), dtype=dtype, device=dev)
        for a, b, whole, at in g.runs:
            src = g_whole if whole else g_other
            if src is not None:
                out[a:b].copy_(src.view(-1, T, H, D)[at:at + b - a])
        return out.transpose(1, 2), None, None


class Ungrouped(torch.autograd.Function):
    """The two kernels' outputs, (n_whole, T, H, D) and (B-n_whole, T, H, D), back in batch order
    as one (B, T, H, D) tensor: one copy forward, one backward."""

    @staticmethod
    def forward(ctx, o_whole: torch.Tensor, o_other: torch.Tensor, g: RowGroups):
        ctx.groups = g
        B, T = g.B, g.T
        out = torch.empty((B, T) + tuple(o_whole.shape[2:]), dtype=o_whole.dtype, device=o_whole.device)
        for a, b, whole, at in g.runs:
            out[a:b].copy_((o_whole if whole else o_other)[at:at + b - a])
        return out

    @staticmethod
    def backward(ctx, grad):
        g = ctx.groups
        g_whole = grad.new_empty((g.n_whole,) + tuple(grad.shape[1:]))
        g_other = grad.new_empty((g.B - g.n_whole,) + tuple(grad.shape[1:]))
        for a, b, whole, at in g.runs:
            (g_whole if whole else g_other)[at:at + b - a].copy_(grad[a:b])
        return g_whole, g_other, None
