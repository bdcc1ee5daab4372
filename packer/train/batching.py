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
    use_cache     False, for ``model(**batch)`` on an HF model: transformers
                  (>= 4.53.1) finds the documents in position_ids only
                  without a cache, and models default to use_cache=True

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

import functools
from typing import Mapping, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..errors import PackerError
from .rows import Row, Rows

MIN_PADDING_FREE = (4, 53, 1)  # transformers: the first release that finds documents in position_ids without a cache

ROW_KEYS = ("input_ids", "labels", "position_ids")
BATCH_KEYS = ROW_KEYS + ("document_ids", "cu_seqlens", "max_seqlen")


def boundaries(position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(B, L) positions -> document_ids (B, L) int32, cu_seqlens (S+1,) int32, max_seqlen.

    Works on any device (one host sync, for max_seqlen).
    """
    if position_ids.device.type == "cpu":
        return _boundaries_numpy(position_ids)
    flat = position_ids.reshape(-1)
    start = flat == 0
    document_ids = (torch.cumsum(start, 0, dtype=torch.int32) - 1).view(position_ids.shape)
    n = torch.tensor([flat.numel()], dtype=torch.int64, device=flat.device)
    cu = torch.cat([start.nonzero().view(-1), n]).to(torch.int32)
    max_seqlen = int((cu[1:] - cu[:-1]).max()) if len(cu) > 1 else 0
    return document_ids, cu, max_seqlen


def _boundaries_numpy(position_ids: torch.Tensor):
    # The same on the CPU, in NumPy: a few times faster than torch ops at this size.
    flat = position_ids.reshape(-1).numpy()
    cu = np.append(np.flatnonzero(flat == 0), len(flat)).astype(np.int32)
    seg = np.diff(cu)
    document_ids = np.repeat(np.arange(len(seg), dtype=np.int32), seg).reshape(position_ids.shape)
    return torch.from_numpy(document_ids), torch.from_numpy(cu), int(seg.max()) if len(seg) else 0


def collate(rows: Sequence[Mapping[str, torch.Tensor]]) -> dict:
    """Batch rows of a PackedDataset; see the module docstring for the keys."""
    if not len(rows):
        raise ValueError("collate needs at least one row")
    built = _built_batch(rows)
    if built is not None:  # rows from PackedDataset.__getitems__: the batch exists already
        batch = {k: built[k] for k in BATCH_KEYS}
    else:
        batch = {k: torch.stack([r[k] for r in rows]) for k in ROW_KEYS}
        batch["document_ids"], batch["cu_seqlens"], batch["max_seqlen"] = boundaries(batch["position_ids"])
    if get_worker_info() is not None:
        batch = _one_shared_block(batch)
    # model(**batch) on an HF model at its defaults: with a cache transformers does not look for
    # documents in position_ids, and they attend to each other (a plain model reads the tensors it needs)
    batch["use_cache"] = False
    return batch


def whole_rows_first(batch: Mapping) -> dict:
    """The same (B, L) batch with its one-document rows first (stable order otherwise).

    For ``packer_attention()`` on CUDA: it runs rows that hold one document
    through the dense causal kernel (cuDNN, as fast as unmasked rows) and the
    other rows through varlen; with the two kinds side by side each is one
    kernel call (docs/training.md gives the figures). The loss, a mean over
    the batch's labelled tokens, does not change. Every (B, L) tensor is
    reordered; document_ids, cu_seqlens and max_seqlen are found again;
    other entries pass through, and internal ones (``_...``) are dropped.
    """
    pos = batch.get("position_ids")
    if not isinstance(pos, torch.Tensor) or pos.dim() != 2:
        raise PackerError("whole_rows_first needs a (B, L) batch with position_ids, as collate or "
                          "PackedLoader gives it")
    B, L = pos.shape
    whole = (pos == 0).sum(1) == 1
    perm = torch.argsort((~whole).to(torch.int8), stable=True)
    out = {}
    for k, v in batch.items():
        if k.startswith("_") or k in ("cu_seqlens", "max_seqlen"):
            continue
        out[k] = v[perm] if isinstance(v, torch.Tensor) and v.shape[:2] == (B, L) else v
    out["document_ids"], out["cu_seqlens"], out["max_seqlen"] = boundaries(out["position_ids"])
    return out


def padding_free(batch: Mapping, flash_kwargs: bool = False) -> dict:
    """A collated batch as HF transformers' padding-free input: one row of B*L.

    Returns ``input_ids``, ``labels``, ``position_ids`` of shape (1, B*L) and
    no attention_mask: the model finds the documents where position_ids
    restart; and ``use_cache=False``, without which transformers skips
    finding them (a model's default is ``use_cache=True``). With
    ``flash_kwargs``, also ``cu_seq_lens_q``/``cu_seq_lens_k`` (int32) and ``max_length_q``/``max_length_k`` (int), the names that
    transformers' flash-attention path reads (as DataCollatorWithFlattening
    writes them), which spares it recomputing them.
    """
    out = {k: batch[k].reshape(1, -1) for k in ROW_KEYS}
    # With a cache, transformers skips its packed-sequence detection (sdpa, eager, flex) and the
    # documents of the row attend to each other; models default to use_cache=True.
    out["use_cache"] = False
    if flash_kwargs:
        cu, mx = batch["cu_seqlens"], int(batch["max_seqlen"])
        out.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=mx, max_length_k=mx)
    return out


def collate_padding_free(rows: Sequence[Mapping[str, torch.Tensor]], flash_kwargs: bool = False) -> dict:
    """``padding_free(collate(rows))``: a ``data_collator`` for HF Trainer.

    Raises PackerError under transformers < 4.53.1 (see ``packer.train.hf``),
    whose sdpa/eager attention would mix the documents of the row."""
    _padding_free_checked()
    return padding_free(collate(rows), flash_kwargs)


@functools.cache
def _padding_free_checked() -> None:
    """``check_padding_free()`` once a process (a failure raises, and is checked again next time)."""
    check_padding_free()


def _built_batch(rows):
    """The (B, L) batch that ``rows`` are, in order, if __getitems__ built them; else None."""
    if type(rows) is Rows:
        return rows.batch
    first = rows[0]
    if type(first) is not Row:
        return None
    b = first.batch
    if len(b["_piece_at"]) != len(rows) + 1:
        return None
    for i, r in enumerate(rows):
        if type(r) is not Row or r.batch is not b or r.index != i:
            return None
    return b


def _one_shared_block(batch: dict) -> dict:
    """The batch's tensors copied into one shared-memory block, as views of it.

    A DataLoader worker sends every tensor to the main process through shared
    memory, one block and one file-descriptor hand-over per tensor; that can
    cost far more than copying these few hundred KB (5 tensors: 2.95 ms per
    batch on the benchmark machine, one block: 0.88 ms; docs/benchmarks.md,
    ``bench/loader_bench.py --ipc``). default_collate allocates its outputs
    the same way (``_new_shared``).
    """
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    spans, n = {}, 0
    for k, t in tensors.items():
        size = t.numel() * t.element_size()
        spans[k] = (n, size)
        n += -(-size // 8) * 8  # keep every view 8-byte aligned
    try:
        storage = torch.UntypedStorage._new_shared(max(n, 1))
    except AttributeError:  # older torch
        storage = torch.empty(max(n, 1), dtype=torch.uint8).share_memory_().untyped_storage()
    block = torch.empty(0, dtype=torch.uint8).set_(storage)
    out = dict(batch)
    for k, t in tensors.items():
        a, size = spans[k]
        v = block[a:a + size].view(t.dtype).view(t.shape)
        v.copy_(t)
        out[k] = v
    return out


def _version(v: str) -> tuple:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def check_padding_free(version: Optional[str] = None) -> None:
    """Raise PackerError if this transformers would mix documents in a
    padding-free (or packed (B, L)) batch run through sdpa, eager or flex."""
    if version is None:
        try:
            import transformers
        except ImportError:
            return
        version = transformers.__version__
    if _version(version) < MIN_PADDING_FREE:
        raise PackerError(
            f"transformers {version} does not find documents in position_ids with sdpa/eager attention, so "
            f"packed documents would attend to each other: upgrade to >= 4.53.1, or use "
            f"attn_implementation=packer.train.hf.packer_attention()")
