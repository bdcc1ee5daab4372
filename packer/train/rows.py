"""The rows of a batch that ``PackedDataset.__getitems__`` built together: ``Rows``,
a sequence of ``Row`` dicts whose tensors view the batch's (B, L) tensors.
``collate`` recognises ``Rows`` and takes the batch itself, without stacking."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import PackerError

STACK_DOC_LENS = ("packer rows: doc_lens holds one length per document piece and does not stack into a batch; "
                  "pass data_collator=packer.collate (HF Trainer with remove_unused_columns=False stacks every "
                  "column), or keep remove_unused_columns=True")


class DocLens(torch.Tensor):
    """A row's piece lengths (int32): a plain tensor, except that ``torch.stack`` of rows'
    ``doc_lens`` raises one PackerError that says what to do instead of torch's
    "stack expects each tensor to be equal size" (what HF's default_data_collator
    meets when Trainer keeps every column). Every other op returns plain tensors."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.stack:
            raise PackerError(STACK_DOC_LENS)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class Row(dict):
    """One row of a batch built by ``PackedDataset.__getitems__``: a dict with
    the keys of ``ds[i]``, whose tensors view the batch's.

    A real dict (not just a Mapping) because HF Trainer's column filter
    (``RemoveColumnsCollator``) passes anything else through untouched, and
    ``doc_lens`` (one length per piece: not stackable) then reaches
    ``default_data_collator``; as a dict it is dropped there, and the rows
    stack into (B, L) input_ids / labels / position_ids. Where every column
    is kept (``remove_unused_columns=False``) ``doc_lens``, a ``DocLens``,
    refuses to stack with one line that names ``packer.collate``."""

    __slots__ = ("batch", "index")
    KEYS = ("input_ids", "labels", "position_ids", "doc_lens")

    def __init__(self, batch: dict, index: int):
        at = batch["_piece_at"]
        super().__init__(input_ids=batch["input_ids"][index], labels=batch["labels"][index],
                         position_ids=batch["position_ids"][index],
                         doc_lens=batch["_doc_lens"][int(at[index]):int(at[index + 1])].as_subclass(DocLens))
        self.batch, self.index = batch, index

    def __repr__(self):
        return f"Row({self.index} of a batch of {self.batch['input_ids'].shape[0]})"


class Rows(Sequence):
    """The rows of a batch built by ``PackedDataset.__getitems__``; items are ``Row``s, made on access."""

    __slots__ = ("batch",)

    def __init__(self, batch: dict):
        self.batch = batch

    def __len__(self):
        return len(self.batch["_piece_at"]) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        return Row(self.batch, i % n)

    def __repr__(self):
        return f"Rows({len(self)} rows)"
