"""Document-causal attention masks built from a collated batch.

A query slot may attend to a key slot when both lie in the same segment
(``document_ids`` equal) and the key is not after the query. Three ways to
apply that, fastest first on a GPU:

- varlen flash attention: no mask at all, pass ``batch["cu_seqlens"]`` and
  ``batch["max_seqlen"]`` with q, k, v flattened to (B*L, H, D):
  ``torch.nn.attention.varlen.varlen_attn(q, k, v, cu, cu, mx, mx, window_size=(-1, 0))``
  or flash-attn's ``flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True)``;
- ``block_mask(batch)``: a flex-attention ``BlockMask`` for
  ``flex_attention(q, k, v, block_mask=...)`` with q, k, v of (B, H, L, D);
- ``dense_mask(batch)``: a (B, 1, L, L) boolean mask for
  ``F.scaled_dot_product_attention(q, k, v, attn_mask=...)``, for setups with
  neither (CPU, older torch). It costs B*L*L bytes and a slower kernel.
  ``dense_mask(batch, dtype=torch.float32)`` is the additive form, for
  eager attention (HF's ``eager`` adds the mask to the scores).
"""

from __future__ import annotations

import functools
from typing import Mapping

import torch


@functools.cache
def _compiled_create_block_mask():
    """``torch.compile(create_block_mask)``, compiled once a process."""
    from torch.nn.attention.flex_attention import create_block_mask

    return torch.compile(create_block_mask)


def _document_ids(batch_or_ids) -> torch.Tensor:
    ids = batch_or_ids["document_ids"] if isinstance(batch_or_ids, Mapping) else batch_or_ids
    if ids.dim() != 2:
        raise ValueError(f"document_ids must be (B, L), got shape {tuple(ids.shape)}")
    return ids


def document_causal(document_ids: torch.Tensor):
    """The flex-attention ``mask_mod`` of a (B, L) ``document_ids`` tensor."""

    def mask_mod(b, h, q_idx, kv_idx):
        return (document_ids[b, q_idx] == document_ids[b, kv_idx]) & (q_idx >= kv_idx)

    return mask_mod


def block_mask(batch_or_ids, *, block_size: int = 128, compile: bool = False):
    """A document-causal flex-attention ``BlockMask`` of shape (B, 1, L, L).

    ``batch_or_ids``: a collated batch, or its (B, L) ``document_ids``; the
    mask lives on their device, so move them first (``batch["document_ids"]
    .to("cuda")``). ``compile=True`` builds it with
    ``torch.compile(create_block_mask)`` (faster per step on a GPU once
    compiled). L need not be a multiple of ``block_size``.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    ids = _document_ids(batch_or_ids)
    B, L = ids.shape
    fn = create_block_mask
    if compile:
        fn = _compiled_create_block_mask()
    return fn(document_causal(ids), B, None, L, L, device=ids.device, BLOCK_SIZE=block_size)


def dense_mask(batch_or_ids, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """(B, 1, L, L): document-causal mask.

    ``dtype=torch.bool`` (default): True where attention is allowed, SDPA's
    convention. A floating ``dtype``: an *additive* mask, 0 where allowed and
    the dtype's most negative value elsewhere: what eager attention (HF's
    ``eager``, or ``scores + mask``) needs; a bool mask there is added as
    0/1 and masks nothing.
    """
    ids = _document_ids(batch_or_ids)
    L = ids.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=ids.device).tril_()
    allowed = ((ids[:, :, None] == ids[:, None, :]) & causal)[:, None]
    if dtype == torch.bool:
        return allowed
    if not dtype.is_floating_point:
        raise ValueError(f"dense_mask: dtype must be torch.bool or a floating dtype, got {dtype}")
    zero = torch.zeros((), dtype=dtype, device=ids.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)
