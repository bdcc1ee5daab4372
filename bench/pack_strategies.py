"""The packing strategies bench/pack_bench.py compares: the peers' algorithms, and packer's.

Each takes lengths ``L`` and seq_len ``S`` and returns a dict of counts (slots,
tokens, truncated tokens, pieces per document); pack_bench's ``metrics`` turns it
into the table's columns. What each strategy is: pack_bench.py's docstring.
"""

from __future__ import annotations

import collections
import importlib

import numpy as np

from packer.pack import pack

P = importlib.import_module("packer.pack")  # the module (packer.pack is also the function)


def from_layout(L: np.ndarray, S: int, lay) -> dict:
    k = np.bincount(lay.doc, minlength=len(L))
    return {"slots": lay.num_rows * S, "tokens": int(lay.length.sum()), "truncated": 0, "pieces": k}


def pad_row(L, S):
    kept = np.minimum(L, S)
    return {"slots": len(L) * S, "tokens": int(kept.sum()), "truncated": int((L - kept).sum()), "pieces": np.ones(len(L), np.int64)}


def pad_batch8(L, S, b=8):
    kept = np.minimum(L, S)
    n = len(L)
    pad = (-n) % b
    width = np.concatenate([kept, np.zeros(pad, np.int64)]).reshape(-1, b).max(axis=1)
    counts = np.full(len(width), b)
    counts[-1] = b - pad
    return {"slots": int((width * counts).sum()), "tokens": int(kept.sum()), "truncated": int((L - kept).sum()),
            "pieces": np.ones(n, np.int64)}


def concat(L, S):
    return from_layout(L, S, pack(L, S, "concat", window=None))  # one stream, as the peers do


def packer_default(L, S):
    return from_layout(L, S, pack(L, S))


def packer_no_repair(L, S):
    return from_layout(L, S, P._bfd(L, S, repair=False))


def items(L, S):
    """Long documents -> full rows + a head; returns (item sizes, item docs, full rows)."""
    n_full = L // S
    head = L - n_full * S
    docs = np.flatnonzero(head)
    return head[docs], docs, int(n_full.sum())


class _MaxTree:
    """Max segment tree over positions 0..n-1 (a Python list, as in TRL and OLMo-core)."""

    def __init__(self, n: int):
        self.size = 1 << max(1, (n - 1).bit_length())
        self.t = [0] * (2 * self.size)

    def set(self, i: int, v: int) -> None:
        t = self.t
        i += self.size
        t[i] = v
        i >>= 1
        while i:
            a, b = t[2 * i], t[2 * i + 1]
            t[i] = a if a > b else b
            i >>= 1

    def leftmost_at_least(self, v: int) -> int:
        """Smallest position whose value is >= v, or -1."""
        t = self.t
        if t[1] < v:
            return -1
        i = 1
        while i < self.size:
            i = 2 * i if t[2 * i] >= v else 2 * i + 1
        return i - self.size


def seg_bfd_rows(sizes: list[int], S: int) -> int:
    """Best fit decreasing, one item at a time: a max tree over free-space values
    (leaf c holds c while some row has c free) and a deque of rows per value."""
    tree = _MaxTree(S + 1)
    rows_with = collections.defaultdict(collections.deque)
    n_rows = 0
    for s in sorted(sizes, reverse=True):
        c = tree.leftmost_at_least(s)
        if c < 0:
            n_rows += 1
            c, r = S, n_rows - 1
        else:
            r = rows_with[c].popleft()
            if not rows_with[c]:
                tree.set(c, 0)
        left = c - s
        if left:
            rows_with[left].append(r)
            tree.set(left, left)
    return n_rows


def seg_bfd_whole(L, S):
    sizes, docs, full = items(L, S)
    rows = seg_bfd_rows(sizes.tolist(), S) + full
    return {"slots": rows * S, "tokens": int(L.sum()), "truncated": 0, "pieces": np.maximum(1, -(-L // S))}


def ffd(L, S):
    sizes, docs, full = items(L, S)
    order = np.argsort(-sizes, kind="stable")
    tree = _MaxTree(len(sizes) + 1)
    n_rows = 0
    free = []
    for s in sizes[order].tolist():
        r = tree.leftmost_at_least(s)
        if r < 0:
            r = n_rows
            n_rows += 1
            free.append(S)
        free[r] -= s
        tree.set(r, free[r])
    rows = n_rows + full
    return {"slots": rows * S, "tokens": int(L.sum()), "truncated": 0, "pieces": np.maximum(1, -(-L // S))}


def trl_bfd(L, S, batch=1000, split=False):
    rows = tokens = truncated = 0
    for a in range(0, len(L), batch):
        b = L[a : a + batch]
        if split:  # bfd_split: fragments of seq_len, then best fit over the fragments
            sizes, _, full = items(b, S)
            rows += seg_bfd_rows(sizes.tolist(), S) + full
            tokens += int(b.sum())
        else:  # bfd: truncate to seq_len
            kept = np.minimum(b, S)
            rows += seg_bfd_rows(kept.tolist(), S)
            tokens += int(kept.sum())
            truncated += int((b - kept).sum())
    pieces = np.maximum(1, -(-L // S)) if split else np.ones(len(L), np.int64)
    return {"slots": rows * S, "tokens": tokens, "truncated": truncated, "pieces": pieces}


STRATEGIES = [
    ("pad/row (truncate)", pad_row),
    ("pad/batch8 (truncate)", pad_batch8),
    ("concat", concat),
    ("FFD, whole set", ffd),
    ("TRL bfd, batches of 1,000 (truncate)", trl_bfd),
    ("TRL bfd_split, batches of 1,000", lambda L, S: trl_bfd(L, S, split=True)),
    ("BFD whole set, one item at a time", seg_bfd_whole),
    ("packer bfd, no repair", packer_no_repair),
    ("**packer (default)**", packer_default),
]
