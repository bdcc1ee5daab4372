"""Packing: a pure function from document lengths to a row layout.

Nothing here touches tokens. ``pack(lengths, seq_len, mode)`` returns a
``Layout``: a flat list of *pieces*, each a contiguous run of one document
placed in one row. Pieces are ordered by (row, position in row), so the slot
where a piece starts is the running sum of the piece lengths before it in its
row. Slots after a row's last piece are padding.

Modes:

- ``bfd`` (default), best-fit decreasing: a document of at most ``seq_len``
  tokens is never split. A longer one is cut into ``ceil(len / seq_len)``
  pieces, the fewest possible: full rows of ``seq_len`` and one remainder,
  which is packed like any other document. Items are placed largest first,
  each into the open row whose free space fits it most tightly.
- ``concat``: documents are concatenated in order and cut every ``seq_len``
  tokens. No padding except in the last row; nearly every long document is
  split.

Both are deterministic: the same lengths give the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODES = ("bfd", "concat")


@dataclass(frozen=True)
class Layout:
    """Pieces of documents placed in rows; all arrays are int64 of shape (P,)."""

    row: np.ndarray  # row of each piece; non-decreasing
    doc: np.ndarray  # index of the document the piece comes from
    offset: np.ndarray  # first token of the piece within its document
    length: np.ndarray  # tokens in the piece, >= 1
    num_rows: int
    seq_len: int

    @property
    def slot(self) -> np.ndarray:
        """Slot in its row where each piece starts, shape (P,)."""
        ends = np.cumsum(self.length)
        starts = ends - self.length
        first = np.searchsorted(self.row, self.row, side="left")  # index of row's first piece
        return starts - starts[first]

    @property
    def padding(self) -> int:
        """Slots not holding a token."""
        return self.num_rows * self.seq_len - int(self.length.sum())


def pack(lengths, seq_len: int, mode: str = "bfd") -> Layout:
    """Lay out documents of the given token ``lengths`` (each >= 1) in rows of ``seq_len``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if seq_len < 1:
        raise ValueError("seq_len must be >= 1")
    if len(lengths) and lengths.min() < 1:
        raise ValueError("every document needs at least one token")
    if mode == "concat":
        return _concat(lengths, seq_len)
    if mode == "bfd":
        return _bfd(lengths, seq_len)
    raise ValueError(f"unknown pack mode {mode!r}; choose from {MODES}")


def _empty(seq_len: int) -> Layout:
    z = np.zeros(0, dtype=np.int64)
    return Layout(z, z, z, z, 0, seq_len)


def _concat(lengths: np.ndarray, seq_len: int) -> Layout:
    if not len(lengths):
        return _empty(seq_len)
    doc_start = np.concatenate([[0], np.cumsum(lengths)])  # global token offset of each doc
    total = int(doc_start[-1])
    num_rows = -(-total // seq_len)
    # Piece boundaries are the union of document starts and row starts.
    cuts = np.union1d(doc_start[:-1], np.arange(0, total, seq_len))
    ends = np.append(cuts[1:], total)
    doc = np.searchsorted(doc_start, cuts, side="right") - 1
    return Layout(
        row=cuts // seq_len,
        doc=doc,
        offset=cuts - doc_start[doc],
        length=ends - cuts,
        num_rows=num_rows,
        seq_len=seq_len,
    )


def _bfd(lengths: np.ndarray, seq_len: int) -> Layout:
    if not len(lengths):
        return _empty(seq_len)
    # 1. Split long documents: full rows first, then the remainder as an item.
    n_full = lengths // seq_len
    rem = lengths % seq_len
    full_docs = np.repeat(np.arange(len(lengths)), n_full)
    full_k = _ranks(n_full)  # k-th full piece of its document
    # Items: fitting documents and remainders (length < seq_len, or == seq_len).
    item_doc = np.nonzero(rem > 0)[0]
    item_len = rem[item_doc]
    item_off = n_full[item_doc] * seq_len

    # 2. Best fit, largest first; ties broken by document index (stable sort).
    order = np.argsort(-item_len, kind="stable")
    rows_of_item = _best_fit(item_len[order], seq_len)
    n_item_rows = int(rows_of_item.max()) + 1 if len(rows_of_item) else 0

    # 3. Assemble: full-piece rows come after the best-fit rows.
    row = np.concatenate([rows_of_item, n_item_rows + np.arange(len(full_docs))])
    doc = np.concatenate([item_doc[order], full_docs])
    off = np.concatenate([item_off[order], full_k * seq_len])
    ln = np.concatenate([item_len[order], np.full(len(full_docs), seq_len, dtype=np.int64)])
    # Within a row, pieces keep the order in which they were placed.
    o = np.argsort(row, kind="stable")
    return Layout(row[o], doc[o], off[o], ln[o], n_item_rows + len(full_docs), seq_len)


def _ranks(counts: np.ndarray) -> np.ndarray:
    """For counts [2, 0, 3] return [0, 1, 0, 1, 2]."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def _best_fit(sizes: np.ndarray, seq_len: int) -> np.ndarray:
    """Assign each size (processed in the given order) to a row; return rows.

    Open rows are bucketed by free space. A Python int is used as a bitset
    over free-space values 0..seq_len: bit c is set while some open row has
    exactly c free slots, so the tightest fit for size s is the lowest set
    bit at or above s, found with one shift and one bit trick in C.
    """
    buckets: dict[int, list[int]] = {}
    avail = 0
    rows = np.empty(len(sizes), dtype=np.int64)
    n_rows = 0
    for i, s in enumerate(sizes.tolist()):
        x = avail >> s
        if x:
            c = s + ((x & -x).bit_length() - 1)
            stack = buckets[c]
            r = stack.pop()
            if not stack:
                del buckets[c]
                avail ^= 1 << c
        else:
            c = seq_len
            r = n_rows
            n_rows += 1
        rows[i] = r
        left = c - s
        if left:
            stack = buckets.get(left)
            if stack is None:
                buckets[left] = [r]
                avail |= 1 << left
            else:
                stack.append(r)
    return rows
