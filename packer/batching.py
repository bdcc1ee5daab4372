"""Batching: collate packed rows into a batch that carries its document boundaries.

``collate(rows)`` takes what ``PackedDataset`` returns (a list of row dicts)
and gives, with B rows of L slots and S segments in the batch::

    input_ids     (B, L)   int64 (or the dataset's input_ids_dtype)
    labels        (B, L)   int64, -100 at every piece start and on padding
    position_ids  (B, L)   int64, restarting at 0 at every segment
    document_ids  (B, L)   int32, the segment each slot belongs to, numbered
                           0..S-1 along the flattened batch (so they stay
                           valid when the batch is viewed as one row of B*L)
    cu_seqlens    (S + 1,) int32, segment boundaries over the flattened B*L
                           slots: 0, ..., B*L (varlen flash attention)
    max_seqlen    int, the longest segment

A *segment* is a document piece, or the padding tail of a row (which gets
its own segment so that it attends only to itself; its labels are -100).
Boundaries are read from ``position_ids`` (a segment starts where it is 0),
vectorised over the batch: the cost does not depend on how many documents a
row holds. ``boundaries(position_ids)`` is the same computation for a batch
that is already on the GPU.

For HF transformers' padding-free path, ``padding_free(batch)`` turns a
batch into one row of B*L (``collate_padding_free`` does both steps).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

ROW_KEYS = ("input_ids", "labels", "position_ids")


def boundaries(position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(B, L) positions -> document_ids (B, L) int32, cu_seqlens (S+1,) int32, max_seqlen."""
    flat = position_ids.reshape(-1)
    start = flat == 0
    document_ids = (torch.cumsum(start, 0, dtype=torch.int32) - 1).view(position_ids.shape)
    n = torch.tensor([flat.numel()], dtype=torch.int64, device=flat.device)
    cu = torch.cat([start.nonzero().view(-1), n]).to(torch.int32)
    max_seqlen = int((cu[1:] - cu[:-1]).max()) if len(cu) > 1 else 0
    return document_ids, cu, max_seqlen


def collate(rows: Sequence[Mapping[str, torch.Tensor]]) -> dict:
    """Batch rows of a PackedDataset; see the module docstring for the keys."""
    if not len(rows):
        raise ValueError("collate needs at least one row")
    batch = {k: _stack([r[k] for r in rows]) for k in ROW_KEYS}
    batch["document_ids"], batch["cu_seqlens"], batch["max_seqlen"] = boundaries(batch["position_ids"])
    return batch


def padding_free(batch: Mapping, flash_kwargs: bool = False) -> dict:
    """A collated batch as HF transformers' padding-free input: one row of B*L.

    Returns ``input_ids``, ``labels``, ``position_ids`` of shape (1, B*L) and
    no attention_mask: the model finds the documents where position_ids
    restart. With ``flash_kwargs``, also ``cu_seq_lens_q``/``cu_seq_lens_k``
    (int32) and ``max_length_q``/``max_length_k`` (int), the names that
    transformers' flash-attention path reads (as DataCollatorWithFlattening
    writes them), which spares it recomputing them.
    """
    out = {k: batch[k].reshape(1, -1) for k in ROW_KEYS}
    if flash_kwargs:
        cu, mx = batch["cu_seqlens"], int(batch["max_seqlen"])
        out.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=mx, max_length_k=mx)
    return out


def collate_padding_free(rows: Sequence[Mapping[str, torch.Tensor]], flash_kwargs: bool = False) -> dict:
    """``padding_free(collate(rows))``: a ``data_collator`` for HF Trainer."""
    return padding_free(collate(rows), flash_kwargs)


def _stack(ts: list[torch.Tensor]) -> torch.Tensor:
    """torch.stack, except when the rows already are the rows of one (B, L) tensor, in order.

    PackedDataset.__getitems__ (the DataLoader path) builds the batch tensors
    first and hands out their rows; stacking them would only copy the batch
    into a new tensor with the same contents, so that tensor is returned.
    """
    base = ts[0]._base
    if (
        base is not None and base.dim() == 2 and base.shape[0] == len(ts) and base.is_contiguous()
        and ts[0].shape == base.shape[1:]
    ):
        step, ptr = base.stride(0) * base.element_size(), base.data_ptr()
        if all(t._base is base and t.data_ptr() == ptr + i * step for i, t in enumerate(ts)):
            return base
    return torch.stack(ts)
