"""HF transformers integration: a document-causal attention that needs no mask.

One line selects it, for any model whose attention goes through
transformers' ``AttentionInterface`` (Llama, Mistral, Qwen2/3, Gemma, ...)::

    from packer.train.hf import packer_attention
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=packer_attention())
    # or, on a model already made: model.set_attn_implementation(packer_attention())

What it does, per attention layer, with q of (B, H, T, D) and k, v of
(B, Hkv, T, D) as transformers hands them over:

- the document boundaries come from the batch: ``cu_seq_lens_q`` /
  ``max_length_q`` when the batch carries them (``collate_padding_free(rows,
  flash_kwargs=True)``), else from ``position_ids`` (a segment starts where
  the position is 0, and at every row start), so (B, L) packer rows and the
  one row of B*L of the padding-free collator both work; they are found once
  a forward (one host sync), not once a layer;
- on CUDA in bf16/fp16 (autocast included: q, k, v are cast to the autocast
  dtype, since the varlen ops are not autocast-aware and RoPE leaves them in
  fp32) rows that hold one document go through SDPA's dense causal kernel
  (cuDNN on Hopper: the fastest there) when that pays for the copies of their
  runs of rows (``split_pays``; ``whole_rows_first(batch)`` puts them side by side), and the
  other rows through flash-attn's ``flash_attn_varlen_func`` where flash-attn
  is installed, else PyTorch's ``torch.nn.attention.varlen.varlen_attn``
  (row_groups.py regroups them);
- elsewhere (CPU, fp32, older torch) it runs SDPA with ``is_causal=True`` on
  each segment alone: exact, slower.

Its mask function builds nothing, so no mask is made per step (the cost the
sdpa and flex paths pay: a dense or flex mask from position_ids), and the mask
cannot be lost: it does not depend on transformers detecting packed
sequences (which needs transformers >= 4.53.1 and no cache) nor on
``use_cache``. It refuses, with one clear error, what it cannot do exactly:
a padding ``attention_mask`` (packer rows need none: the padding tail is a
segment of its own), a key/value cache longer than the query (generation:
switch back with ``model.set_attn_implementation("sdpa")``), sliding windows,
soft-capping and attention dropout.

``check_padding_free()`` is the version check for the other path (sdpa,
eager or flex finding documents in ``position_ids``); ``packed_sampler`` and
``use_packed_sampler`` give HF Trainer packer's sampler.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import threading
import weakref
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from ..errors import PackerError
from .row_groups import Grouped, RowGroups, Ungrouped
from .batching import MIN_PADDING_FREE, check_padding_free  # noqa: F401 (re-exported)

NAME = "packer_varlen"
KERNELS = ("auto", "flash_attn", "torch_varlen", "sdpa")
# transformers detects packed sequences from position_ids (sdpa, eager, flex)
# from 4.53.1 on; before, a padding-free batch attends across documents.

# One-document rows go dense when that pays: each run of rows costs its own copies, and a
# whole row saves attention work in proportion to T^2. Measured on an H200 (docs/benchmarks.md,
# issue 30.4): web-like rows at 2048 in sampler order (~16 runs, ~15 whole rows) ran slower
# split (0.916x of unmasked) than all through varlen (0.961x); real text at 2048 (~9 runs, ~27
# whole rows) ran faster split (0.973x against 0.948x), as did both corpora at 8192.
MAX_RUNS = 4  # at most this many runs: always split
WHOLE_PER_RUN = 2  # else split when whole rows * (T / 2048)^2 >= this * runs


def split_pays(n_whole: int, runs: int, T: int) -> bool:
    """Whether a batch's ``n_whole`` one-document rows of ``T`` slots, in ``runs`` runs of rows,
    go through the dense kernel (the rest varlen) rather than all rows through varlen."""
    return runs <= MAX_RUNS or n_whole * (T / 2048) ** 2 >= WHOLE_PER_RUN * runs


def packer_attention(kernel: str = "auto") -> str:
    """Register packer's attention with transformers; returns the name to pass
    as ``attn_implementation``. ``kernel``: ``"auto"`` (flash-attn, else
    torch varlen_attn, on CUDA; the exact per-segment SDPA elsewhere), or one
    of ``"flash_attn"``, ``"torch_varlen"``, ``"sdpa"`` to force one.

    Each kernel has a name of its own (``packer_varlen`` for ``"auto"``,
    ``packer_varlen_<kernel>`` otherwise) whose function carries the kernel,
    so two models in one process can use two kernels."""
    if kernel not in KERNELS:
        raise PackerError(f"unknown attention kernel {kernel!r}; choose one of {', '.join(KERNELS)}")
    try:
        from transformers import AttentionInterface
    except ImportError as e:
        raise PackerError(f"packer_attention needs transformers >= 4.48 (AttentionInterface): {e}") from None
    name = name_of(kernel)
    AttentionInterface.register(name, _forward_for(kernel))
    try:  # transformers >= 4.53: without a mask function of our own it would drop a 2D mask silently
        from transformers.masking_utils import AttentionMaskInterface
        AttentionMaskInterface.register(name, _no_mask)
    except ImportError:
        pass
    return name


def name_of(kernel: str) -> str:
    """The ``attn_implementation`` name ``packer_attention(kernel)`` registers."""
    return NAME if kernel == "auto" else f"{NAME}_{kernel}"


@functools.lru_cache(maxsize=None)
def _forward_for(kernel: str):
    """The attention function of one kernel (one object per kernel: registering twice changes nothing)."""

    def forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        return varlen_attention_forward(module, query, key, value, attention_mask, scaling, dropout,
                                        kernel=kernel, **kwargs)

    forward.__name__ = forward.__qualname__ = f"packer_attention_{kernel}"
    forward.__doc__ = f"varlen_attention_forward with kernel={kernel!r}."
    return forward


def _no_mask(*args, attention_mask=None, **kwargs):
    """The mask function for ``NAME``: builds nothing; refuses a padding mask (one host sync)."""
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 and not bool(attention_mask.all()):
        raise PackerError(f"{NAME} attention takes no padding attention_mask: packer rows need none "
                          "(drop attention_mask from the batch)")
    return None


def segments_of(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(B, T) positions -> cu_seqlens (S+1,) int32 over the flattened B*T slots, and the longest segment.

    A segment starts where the position is 0 and at every row start. One host sync (for the max).
    """
    starts = position_ids == 0
    starts[:, 0] = True
    flat = starts.reshape(-1)
    n = torch.tensor([flat.numel()], dtype=torch.int64, device=flat.device)
    cu = torch.cat([flat.nonzero().view(-1), n]).to(torch.int32)
    return cu, int((cu[1:] - cu[:-1]).max())


@dataclass
class _Segments:
    """One batch's document boundaries: cu (S+1,) int32 over the B*T slots, the longest segment."""

    cu: torch.Tensor
    mx: int
    B: int
    T: int
    _groups: Optional[RowGroups] = None

    def groups(self) -> RowGroups:
        """The rows split into one-document rows and the others (found once a forward)."""
        if self._groups is None:
            self._groups = RowGroups.of(self.cu, self.B, self.T)
        return self._groups


class _Memo(threading.local):
    """The last batch's boundaries, so that they are found once a forward, not once a layer.

    Every layer of one forward gets the same position_ids (or cu_seq_lens_q)
    tensor object; a weak reference to it, with its version counter, says the
    boundaries still hold without looking at the data (a host sync each time:
    12 layers, 12 syncs, and the GPU waits for the CPU after each). One per
    thread (nn.DataParallel runs replicas in threads).
    """

    source = None  # weakref to the tensor the boundaries came from
    version = -1
    key = None
    value = None


_memo = _Memo()


def _boundaries(kwargs, B: int, T: int, device) -> _Segments:
    """The (B, T) batch's segments, from cu_seq_lens_q/max_length_q or from position_ids."""
    cu, mx = kwargs.get("cu_seq_lens_q"), kwargs.get("max_length_q")
    source = cu if cu is not None and mx is not None else kwargs.get("position_ids")
    if source is None:
        raise PackerError(f"{NAME} attention needs the batch's position_ids (or cu_seq_lens_q/max_length_q) "
                          "to find the documents; pass position_ids to the model")
    key = (B, T, str(device), source is cu)
    m = _memo
    held = m.source() if m.source is not None else None
    if held is source and m.version == source._version and m.key == key:
        return m.value
    if source is cu:
        cu = cu.to(device=device, dtype=torch.int32)
        mx = int(mx)
    else:
        pos = source.to(device)
        if pos.shape[0] != B:
            pos = pos.expand(B, -1)
        cu, mx = segments_of(pos)
    if int(cu[-1]) != B * T:  # once a forward
        raise PackerError(f"{NAME} attention: cu_seq_lens_q ends at {int(cu[-1])}, but the batch has {B * T} slots")
    seg = _Segments(cu, mx, B, T)
    m.source, m.version, m.key, m.value = weakref.ref(source), source._version, key, seg
    return seg


def _refuse(module, attention_mask, kwargs, query, key) -> None:
    if key.shape[2] != query.shape[2]:
        raise PackerError(
            f"{NAME} attention is for training on packed rows: it got {query.shape[2]} queries against "
            f"{key.shape[2]} cached keys (generation?); use model.set_attn_implementation('sdpa') to generate")
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 and not bool(attention_mask.all()):
        raise PackerError(f"{NAME} attention takes no padding attention_mask: packer rows need none "
                          "(drop attention_mask from the batch)")
    for name in ("sliding_window", "softcap"):
        if kwargs.get(name) is not None or getattr(module, name, None) not in (None, 0):
            raise PackerError(f"{NAME} attention does not support {name}; use the model's own attention")


def varlen_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                             scaling: Optional[float] = None, dropout: float = 0.0, *, kernel: str = "auto",
                             **kwargs):
    """transformers' attention-function contract: q (B, H, T, D), k/v (B, Hkv, T, D)
    -> (output (B, T, H, D), None). ``kernel`` as ``packer_attention`` takes it. See the module docstring."""
    _refuse(module, attention_mask, kwargs, query, key)
    if dropout and module.training:
        raise PackerError(f"{NAME} attention does not support attention dropout ({dropout}); set it to 0")
    B, H, T, D = query.shape
    seg = _boundaries(kwargs, B, T, query.device)
    chosen = kernel
    kernel = _pick(query, chosen)
    if kernel == "sdpa":
        # (B, H, T, D) -> (B*T, H, D): the varlen layout
        q, k, v = (t.transpose(1, 2).reshape(B * T, t.shape[1], D) for t in (query, key, value))
        out = _per_segment(q, k, v, seg.cu, scaling)
    else:
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else query.dtype
        fn = _KERNEL_FNS[kernel]
        groups = seg.groups() if chosen == "auto" else None
        if groups is not None and groups.mixed and split_pays(groups.n_whole, len(groups.runs), T):  # dense + varlen
            (qv, *qw), (kv, *kw), (vv, *vw) = (Grouped.apply(t, dtype, groups) for t in (query, key, value))
            o_whole = [_dense_causal(*c, rows, T, scaling) for c, rows in zip(zip(qw, kw, vw), groups.chunks)]
            o_other = fn(qv, kv, vv, groups.cu, groups.mx, scaling).view(B - groups.n_whole, T, H, D)
            out = Ungrouped.apply(groups, o_other, *o_whole)
        else:
            q, k, v = (_varlen_layout(t, dtype) for t in (query, key, value))
            if groups is not None and groups.n_whole == B:
                out = _dense_causal(q, k, v, B, T, scaling)
            else:
                out = fn(q, k, v, seg.cu, seg.mx, scaling)
    return out.view(B, T, H, D), None


def _varlen_layout(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, H, T, D) -> (B*T, H, D) contiguous in ``dtype``: a view where it already is, else one copy
    (cast and re-layout together; ``.to(memory_format=...)`` would not copy when the dtype matches)."""
    B, H, T, D = t.shape
    x = t.transpose(1, 2)
    if x.dtype == dtype and x.is_contiguous():
        return x.view(B * T, H, D)
    return torch.empty((B, T, H, D), dtype=dtype, device=t.device).copy_(x).view(B * T, H, D)


def _pick(q: torch.Tensor, kernel: str) -> str:
    """The kernel to run: ``kernel`` when forced, else the best for q's device and dtype."""
    if kernel != "auto":
        if kernel != "sdpa" and q.device.type != "cuda":
            raise PackerError(f"attention kernel {kernel!r} runs on CUDA only, and the model is on "
                              f"{q.device.type}: use packer_attention() (the exact per-document SDPA there)")
        return kernel
    low = q.dtype in (torch.bfloat16, torch.float16) or torch.is_autocast_enabled("cuda")
    if q.device.type != "cuda" or not low:
        return "sdpa"
    return _cuda_kernel()


@functools.lru_cache(maxsize=None)
def _cuda_kernel() -> str:
    """flash-attn where installed, else torch's varlen_attn (looked up once: a failed
    import is retried on every call, in every layer)."""
    if importlib.util.find_spec("flash_attn") is not None:
        return "flash_attn"
    return "torch_varlen" if importlib.util.find_spec("torch.nn.attention.varlen") else "sdpa"


@functools.lru_cache(maxsize=None)
def _varlen_params() -> frozenset:
    """The keyword arguments this torch's varlen_attn takes (its signature changed in 2.10)."""
    from torch.nn.attention.varlen import varlen_attn

    return frozenset(inspect.signature(varlen_attn).parameters)


def _torch_varlen(q, k, v, cu, mx, scale):
    from torch.nn.attention.varlen import varlen_attn

    params = _varlen_params()
    kw = {}
    if "scale" in params:
        kw["scale"] = scale
    elif scale is not None and abs(scale - q.shape[-1] ** -0.5) > 1e-6:
        raise PackerError(f"this torch's varlen_attn takes no scale, and the model's ({scale}) is not 1/sqrt(head_dim)")
    if "window_size" in params:  # torch >= 2.10: (-1, 0) = causal
        kw["window_size"] = (-1, 0)
    else:  # torch 2.9
        kw["is_causal"] = True
    if k.shape[1] != q.shape[1]:
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return varlen_attn(q, k, v, cu, cu, mx, mx, **kw)


def _dense_causal(q, k, v, rows: int, T: int, scale):
    """Rows that are one document each: SDPA's default causal kernel (cuDNN on Hopper).
    q (rows*T, H, D), k/v (rows*T, Hkv, D) -> (rows, T, H, D) (a view of the kernel's output)."""
    H, Hkv, D = q.shape[1], k.shape[1], q.shape[2]
    q, k, v = (t.view(rows, T, t.shape[1], D).transpose(1, 2) for t in (q, k, v))
    if Hkv != H:
        k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).transpose(1, 2)


def _flash_attn(q, k, v, cu, mx, scale):
    from flash_attn import flash_attn_varlen_func

    return flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, softmax_scale=scale, causal=True)


_KERNEL_FNS = {"flash_attn": _flash_attn, "torch_varlen": _torch_varlen}


def _per_segment(q, k, v, cu, scale):
    """Exact fallback: causal SDPA over each segment alone. q (N, H, D), k/v (N, Hkv, D) -> (N, H, D)."""
    out = torch.empty_like(q)
    rep = q.shape[1] // k.shape[1]
    bounds = cu.tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))  # (H, n, D)
        if rep > 1:
            ks, vs = ks.repeat_interleave(rep, 0), vs.repeat_interleave(rep, 0)
        out[a:b] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale).transpose(0, 1)
    return out


def packed_sampler(dataset, args=None, **kwargs):
    """A PackedSampler for HF Trainer: seed from ``args.seed``, one global
    order (accelerate shards its batches over processes). kwargs pass on."""
    from .sampler import PackedSampler

    kwargs.setdefault("seed", getattr(args, "seed", 0) if args is not None else 0)
    # one global order on every process: accelerate hands each process its batches of it
    # (a rank-sharded sampler here would be sharded twice)
    kwargs.setdefault("rank", 0)
    kwargs.setdefault("world_size", 1)
    return PackedSampler(dataset, **kwargs)


def use_packed_sampler(trainer, **kwargs):
    """Make ``trainer`` (an HF Trainer, or a subclass such as TRL's) read its
    train set in PackedSampler order: ``use_packed_sampler(Trainer(...))``.

    The order is a function of the seed and the epoch, so a run resumed from
    a Trainer checkpoint (which replays the epoch's order and skips the
    batches already trained) reads exactly the rows the full run reads.
    Returns the trainer.
    """

    def _get_train_sampler(train_dataset=None, *a, **k):
        ds = train_dataset if train_dataset is not None else trainer.train_dataset
        return packed_sampler(ds, trainer.args, **kwargs)

    trainer._get_train_sampler = _get_train_sampler
    return trainer
