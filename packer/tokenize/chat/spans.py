"""Character spans: where two renderings agree (``common_prefix``, ``common_suffix``), where a reply starts
when the turns before it render otherwise alone (``realigned``), spans merged, and spans mapped to tokens
(``mask_from_offsets``, transformers' rule)."""

from __future__ import annotations

import numpy as np


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _common_suffix(a: str, b: str) -> int:
    """The length of the longest common suffix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    lo, hi = 0, n + 1  # a[-lo:] == b[-lo:] (lo == 0: trivially), not so for hi (or hi beyond n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid
    return lo


def realigned(text: str, before: str, header: str, floor: int) -> int | None:
    """Where a reply starts in ``text`` when the turns before it, rendered alone (``before``), differ from
    the whole conversation's (gpt-oss drops a tool call's analysis once a final reply follows): after the
    place where its generation prompt (``header``) follows text that differs least from ``before`` (the
    characters left over once their common prefix and common suffix are taken off both). None if no
    place, or two equally near, fit so."""
    if not header:
        return None
    c = common_prefix(before, text)
    costs = []
    at = text.find(header, max(c, floor))
    while at >= 0:
        tail = _common_suffix(before, text[:at])
        costs.append((max(0, len(before) - tail - c) + max(0, at - tail - c), at + len(header)))
        at = text.find(header, at + 1)
    costs.sort()
    if not costs or (len(costs) > 1 and costs[0][0] == costs[1][0]):
        return None
    return costs[0][1]


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(x for x in spans if x[1] > x[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def mask_from_offsets(offsets: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """(tokens,) uint8: 1 where a token's character range [start, end) overlaps a span.

    ``offsets`` is (tokens, 2) character offsets into the rendered string;
    ``spans`` are sorted, disjoint [start, end). The rule of transformers'
    ``assistant_masks``: for each token, the first span ending after its
    start; trained if the token ends after that span begins.
    """
    n = len(offsets)
    if not spans or not n:
        return np.zeros(n, np.uint8)
    s = np.array(spans, dtype=np.int64)
    j = np.searchsorted(s[:, 1], offsets[:, 0], side="right")
    ok = j < len(s)
    out = np.zeros(n, np.uint8)
    out[ok] = offsets[ok, 1] > s[j[ok], 0]
    return out
