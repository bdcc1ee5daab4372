"""hf_dataset's ``labels`` and ``position_ids``, computed as rows are read (see hf_datasets.py); imports datasets.

A packed row's ``labels`` and ``position_ids`` follow from its ``input_ids``,
``doc_lens`` (and a chat build's ``loss_mask``), so they are made on access by
a datasets transform, not written anywhere: 16 bytes a slot (two int64
columns) would be eight times a uint16 build. ``PackedRows`` is the
``datasets.Dataset`` that carries the transform; its ``remove_columns`` hides
a column the transform reads instead of dropping it, so HF Trainer (which
removes the columns its model's forward does not take) still gets the
``labels`` and ``position_ids`` made from them.
"""

from __future__ import annotations

import datasets
import numpy as np

IGNORE_INDEX = -100
LOSS_MASK = "loss_mask"
MADE = ("labels", "position_ids")  # made by the transform
READ = ("input_ids", "doc_lens", LOSS_MASK)  # what it reads


class Rows:
    """The transform: a batch of shard rows (dict of lists) with ``labels`` and ``position_ids`` added,
    the hidden columns left out. Picklable (DataLoader workers, ``map(num_proc=...)``)."""

    def __init__(self, seq_len: int, labels: bool, hidden: frozenset = frozenset()):
        self.seq_len, self.labels, self.hidden = seq_len, labels, frozenset(hidden)

    def __call__(self, batch: dict) -> dict:
        out = {k: v for k, v in batch.items() if k not in self.hidden}
        if "doc_lens" not in batch or "input_ids" not in batch:
            return out  # (a column it reads is gone: nothing to make)
        L = self.seq_len
        pos, lab = [], []
        masks = batch.get(LOSS_MASK)
        for r, lens in enumerate(batch["doc_lens"]):
            lens = np.asarray(lens, dtype=np.int64)
            used = int(lens.sum())
            seg = lens if used >= L else np.append(lens, L - used)  # the padding tail: one more segment
            starts = np.cumsum(seg) - seg
            pos.append((np.arange(L, dtype=np.int64) - np.repeat(starts, seg)).tolist())
            if self.labels and "labels" not in self.hidden:
                x = np.array(batch["input_ids"][r], dtype=np.int64)
                x[used:] = IGNORE_INDEX  # the padding tail
                x[starts[:len(lens)]] = IGNORE_INDEX  # no prediction across a boundary
                if masks is not None:  # a chat build: no loss where the mask is off
                    x[np.asarray(masks[r]) == 0] = IGNORE_INDEX
                lab.append(x.tolist())
        if self.labels and "labels" not in self.hidden:
            out["labels"] = lab
        if "position_ids" not in self.hidden:
            out["position_ids"] = pos
        return out


class PackedRows(datasets.Dataset):
    """A ``datasets.Dataset`` whose ``labels`` and ``position_ids`` are made on access (``Rows``)."""

    def remove_columns(self, column_names, new_fingerprint=None):
        rows = self._rows()
        if rows is None:
            return super().remove_columns(column_names, new_fingerprint=new_fingerprint)
        names = [column_names] if isinstance(column_names, str) else list(column_names)
        hide = {n for n in names if n in MADE or n in READ and n in self._data.column_names}
        drop = [n for n in names if n not in hide]
        ds = super().remove_columns(drop, new_fingerprint=new_fingerprint) if drop else self
        return ds.with_transform(Rows(rows.seq_len, rows.labels, rows.hidden | hide))

    def __getitem__(self, key):
        rows = self._rows()
        if isinstance(key, str) and key in MADE and rows is not None and key not in rows.hidden:
            return self[0:len(self)][key]  # a made column whole: every row read (datasets' Column needs a stored one)
        return super().__getitem__(key)

    def _rows(self) -> Rows | None:
        t = (self._format_kwargs or {}).get("transform") if self._format_type == "custom" else None
        return t if isinstance(t, Rows) else None
