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

    @property
    def chunks(self) -> list:
        """The whole rows' group cut into powers of two, largest first (27 -> [16, 8, 2, 1]): the
        dense kernel sees at most log2(B) + 1 batch sizes, so cuDNN plans each shape once and not
        once per count of whole rows (a new plan in a timed step cost 10-40 ms on an H200)."""
        return [1 << i for i in range(self.n_whole.bit_length() - 1, -1, -1) if self.n_whole >> i & 1]


def _pieces(at: int, n: int, sizes: list):
    """Rows [at, at+n) of the whole group, cut where its chunks (``sizes``) meet:
    (chunk, row in chunk, row in the run, rows) for each piece."""
    start = 0
    for c, size in enumerate(sizes):
        lo, hi = max(at, start), min(at + n, start + size)
        if lo < hi:
            yield c, lo - start, lo - at, hi - lo
        start += size


class Grouped(torch.autograd.Function):
    """(B, H, T, D) -> (other rows ((B-n_whole)*T, H, D), then the whole rows as ``g.chunks``,
    each (rows*T, H, D)) in ``dtype``: one copy forward (cast, re-layout and regroup together),
    one backward. Each piece is a view of one buffer, so the chunks cost no copy."""

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
        bounds = np.cumsum([0] + g.chunks) * T
        return (flat[g.n_whole * T:],) + tuple(flat[s:e] for s, e in zip(bounds[:-1], bounds[1:]))

    @staticmethod
    def backward(ctx, g_other, *g_chunks):
        dtype, (B, H, T, D) = ctx.src
        g = ctx.groups
        given = [x for x in (g_other,) + g_chunks if x is not None]
        alloc = torch.empty if len(given) == 1 + len(g_chunks) else torch.zeros
        out = alloc((B, T, H, D), dtype=dtype, device=given[0].device)
        for a, b, whole, at in g.runs:
            if not whole:
                if g_other is not None:
                    out[a:b].copy_(g_other.view(-1, T, H, D)[at:at + b - a])
                continue
            for c, off, row, n in _pieces(at, b - a, g.chunks):
                if g_chunks[c] is not None:
                    out[a + row:a + row + n].copy_(g_chunks[c].view(-1, T, H, D)[off:off + n])
        return out.transpose(1, 2), None, None


class Ungrouped(torch.autograd.Function):
    """The kernels' outputs, the other rows (B-n_whole, T, H, D) and the whole rows' chunks
    (rows, T, H, D) each, back in batch order as one (B, T, H, D) tensor: one copy forward, one
    backward."""

    @staticmethod
    def forward(ctx, g: RowGroups, o_other: torch.Tensor, *o_chunks: torch.Tensor):
        ctx.groups = g
        out = torch.empty((g.B,) + tuple(o_other.shape[1:]), dtype=o_other.dtype, device=o_other.device)
        for a, b, whole, at in g.runs:
            if not whole:
                out[a:b].copy_(o_other[at:at + b - a])
                continue
            for c, off, row, n in _pieces(at, b - a, g.chunks):
                out[a + row:a + row + n].copy_(o_chunks[c][off:off + n])
        return out

    @staticmethod
    def backward(ctx, grad):
        g = ctx.groups
        rest = tuple(grad.shape[1:])
        g_other = grad.new_empty((g.B - g.n_whole,) + rest)
        g_chunks = [grad.new_empty((size,) + rest) for size in g.chunks]
        for a, b, whole, at in g.runs:
            if not whole:
                g_other[at:at + b - a].copy_(grad[a:b])
                continue
            for c, off, row, n in _pieces(at, b - a, g.chunks):
                g_chunks[c][off:off + n].copy_(grad[a + row:a + row + n])
        return (None, g_other) + tuple(g_chunks)
