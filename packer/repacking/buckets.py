"""Dataset decomposition (Pouransari et al., NeurIPS 2024): documents cut into pieces of power-of-two lengths.

A pure, deterministic function of document lengths. A document of n tokens, with buckets MIN..MAX (powers
of two), yields ``n // MAX`` pieces of MAX tokens, then one piece per set bit of ``n % MAX`` from the
highest down to MIN, back to back from its first token. The bits below MIN (``n % MIN`` tokens at the end
of the document, or the whole document when it is shorter than MIN) cannot become a row of any bucket:
they are dropped and counted by reason, never silently. Each piece becomes one row of exactly its length,
so no attention crosses documents and no mask is needed.

Within one bucket of one shard the pieces are ordered by (document, offset). A bucket shard records them
as an ordinary build does: its documents are the source documents that have a piece there (numbered
0..n-1 in source order), each with its pieces at offsets from the start of its run in that bucket
(``spans``); ``decompose`` of the source shard's lengths gives each piece's place in its source document.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import PackerError

UNDER_MIN = "document_under_min"  # a whole document shorter than MIN
TAIL_UNDER_MIN = "tail_under_min"  # the last n % MIN tokens of a longer document
MAX_BUCKET = 1 << 30


@dataclass(frozen=True)
class Pieces:
    """Every piece of a decomposition, sorted by (length, doc, offset); int64 arrays of shape (P,)."""

    length: np.ndarray  # the piece's bucket (a power of two, MIN..MAX)
    doc: np.ndarray  # its document's index
    offset: np.ndarray  # its first token's place in the document

    def of(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """(doc, offset) of the pieces of one bucket, in (doc, offset) order."""
        a, b = np.searchsorted(self.length, [length, length + 1])
        return self.doc[a:b], self.offset[a:b]


def parse_buckets(spec) -> tuple[int, int]:
    """``"256:8192"`` or ``(256, 8192)`` to (MIN, MAX); ``PackerError`` unless both are powers of two,
    MIN <= MAX."""
    try:
        lo, hi = (int(x) for x in (spec.split(":") if isinstance(spec, str) else spec))
    except (TypeError, ValueError):
        raise PackerError(f"--buckets takes MIN:MAX, two powers of two such as 256:8192 (got {spec!r})") from None
    for v in (lo, hi):
        if v < 1 or v & (v - 1) or v > MAX_BUCKET:
            raise PackerError(f"--buckets: {v} is not a power of two from 1 to {MAX_BUCKET} (got {spec!r})")
    if lo > hi:
        raise PackerError(f"--buckets: MIN {lo} is over MAX {hi}")
    return lo, hi


def bucket_lengths(lo: int, hi: int) -> list[int]:
    """The bucket lengths MIN, 2 MIN, ..., MAX."""
    return [1 << k for k in range(lo.bit_length() - 1, hi.bit_length())]


def decompose(lengths, lo: int, hi: int) -> tuple[Pieces, dict[str, dict[str, int]]]:
    """The pieces of documents of ``lengths`` in buckets ``lo``..``hi``, and what was dropped:
    {reason: {"documents": n, "tokens": t}} (reasons ``UNDER_MIN``, ``TAIL_UNDER_MIN``; absent if none)."""
    n = np.asarray(lengths, dtype=np.int64)
    docs = np.arange(len(n), dtype=np.int64)
    full, rest = n // hi, n % hi
    lens, dd, offs = [np.full(int(full.sum()), hi, np.int64)], [np.repeat(docs, full)], []
    offs.append(_runs(full) * hi)
    for b in reversed(bucket_lengths(lo, hi)[:-1]):
        has = (rest & b) != 0
        lens.append(np.full(int(has.sum()), b, np.int64))
        dd.append(docs[has])
        offs.append(full[has] * hi + (rest[has] & ~(2 * b - 1)))
    length, doc, offset = np.concatenate(lens), np.concatenate(dd), np.concatenate(offs)
    order = np.lexsort((offset, doc, length))
    tail = rest & (lo - 1)
    under = n < lo
    dropped = {}
    if under.any():
        dropped[UNDER_MIN] = {"documents": int(under.sum()), "tokens": int(n[under].sum())}
    cut = ~under & (tail > 0)
    if cut.any():
        dropped[TAIL_UNDER_MIN] = {"documents": int(cut.sum()), "tokens": int(tail[cut].sum())}
    return Pieces(length[order], doc[order], offset[order]), dropped


def spans(doc: np.ndarray, offset: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One bucket's pieces (in (doc, offset) order) as a build records them: (the source document of each
    bucket document, where its run starts in it, its run's tokens, each piece's bucket document)."""
    if not len(doc):
        z = np.zeros(0, np.int64)
        return z, z, z, z
    first = np.r_[True, doc[1:] != doc[:-1]]
    which = np.cumsum(first) - 1
    source = doc[first]
    start = offset[first]
    count = np.bincount(which)
    return source, start, count * length, which


def merge_dropped(parts) -> dict[str, dict[str, int]]:
    """The sum of several ``decompose`` dropped counts."""
    out: dict[str, dict[str, int]] = {}
    for d in parts:
        for reason, c in d.items():
            t = out.setdefault(reason, {"documents": 0, "tokens": 0})
            t["documents"] += c["documents"]
            t["tokens"] += c["tokens"]
    return dict(sorted(out.items()))


def _runs(counts: np.ndarray) -> np.ndarray:
    """0, 1, ..., c-1 for each count c, back to back."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
