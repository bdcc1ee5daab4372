"""Packing: a pure function from document lengths to a row layout.

Nothing here touches tokens. ``pack(lengths, seq_len, mode)`` returns a
``Layout``: a flat list of *pieces*, each a contiguous run of one document
placed in one row. Pieces are ordered by (row, position in row), so the slot
where a piece starts is the running sum of the piece lengths before it in its
row. Slots after a row's last piece are padding.

Modes:

- ``bfd`` (default), best-fit decreasing, then a repair pass. A document of
  at most ``seq_len`` tokens is never split. A longer one is cut into
  ``ceil(len / seq_len)`` pieces, the fewest possible: a *head* of
  ``len % seq_len`` tokens, packed like any short document, then full rows.
  Items (short documents and heads) are placed largest first, each into the
  open row whose free space fits it most tightly. While there are more rows
  than ``ceil(tokens / seq_len)``, the repair pass re-packs the least-filled
  row together with rows that have gaps into one row fewer.
- ``concat``: documents are concatenated in order and cut every ``seq_len``
  tokens. No padding except in the last row; nearly every long document is
  split.

Why heads and not tails: a document's pieces then appear in layout order
(item rows come before full rows), so reading its pieces by (row, slot)
gives its tokens in order. Why packing heads loses nothing: take any layout
where every document has the fewest pieces. A long document's k pieces sit
in k different rows, and what else those rows hold is at most
``k * seq_len - len = seq_len - head`` tokens; so the same k rows can hold
k - 1 full rows of it plus one row with its head and all of that other
content. Doing this for every long document keeps the row count, so the
fewest rows with fewest pieces is exactly the fewest rows for packing the
items. (docs/packing.md has the measurements.)

Both modes are deterministic: the same lengths give the same layout.

``window`` (tokens) packs consecutive runs of documents of at most about
that many tokens independently, so working memory is bounded by the window,
not by the input (DEFAULT_WINDOW says how the default was chosen). In a
build each work unit is one ``pack`` call, smaller than a window.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import numpy as np

MODES = ("bfd", "concat")

# Tokens per packing window. From the measured curve (docs/packing.md): padding
# falls as the window grows, because each window ends in one partly empty row,
# until about 2^26-2^27 tokens, where best fit's own waste is all that is left
# at seq_len 2048 and the last row costs < 0.01% at 8192. Pack's working memory
# is ~110 bytes per document, so a window of 2^27 tokens of ~1k-token documents
# needs ~15 MB. A build unit (64 MB of text: at most 2^26 tokens plus one EOS per
# document) is one window.
DEFAULT_WINDOW = 1 << 27

REPAIR_ROWS = 32  # full rows with the most pieces added to each repair (see _repair)
REPAIR_MARGIN = 1.0  # free space gathered for a repair: (1 + this) x the tokens to move
REPAIR_GAP_ROWS = 256  # at most this many rows with gaps in one repair
REPAIR_TRIES = 8  # rows the repair pass tries to remove, at most


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


def pack(lengths, seq_len: int, mode: str = "bfd", window: int | None = DEFAULT_WINDOW) -> Layout:
    """Lay out documents of the given token ``lengths`` (each >= 1) in rows of ``seq_len``.

    ``window`` (tokens): inputs of more tokens are cut into runs of
    consecutive documents of equal size, at most about ``window`` tokens
    each, packed on their own. None packs everything together.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1:
        raise ValueError("lengths must be one-dimensional")
    if seq_len < 1:
        raise ValueError("seq_len must be >= 1")
    if len(lengths) and lengths.min() < 1:
        raise ValueError("every document needs at least one token")
    if mode not in MODES:
        raise ValueError(f"unknown pack mode {mode!r}; choose from {MODES}")
    if window is not None and window < 1:
        raise ValueError("window must be >= 1 token")
    fn = _concat if mode == "concat" else _bfd
    if window is None or int(lengths.sum()) <= window:
        return fn(lengths, seq_len)
    return _windowed(fn, lengths, seq_len, window)


def window_bounds(lengths: np.ndarray, window: int) -> np.ndarray:
    """Document indices where windows start, plus len(lengths) at the end.

    ceil(total / window) windows of equal token share: a window closes after
    the document that reaches its share (so a window may hold one long
    document, and no window is a sliver left over).
    """
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    n = max(1, -(-total // window))
    share = -(-total // n)
    cut = np.searchsorted(ends, np.arange(share, total, share), side="left") + 1
    return np.unique(np.concatenate([[0], cut, [len(lengths)]]))


def _windowed(fn, lengths: np.ndarray, seq_len: int, window: int) -> Layout:
    """Pack each window on its own and stack the layouts, rows and documents renumbered."""
    bounds = window_bounds(lengths, window)
    parts, rows = [], 0
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        lay = fn(lengths[a:b], seq_len)
        parts.append((lay.row + rows, lay.doc + a, lay.offset, lay.length))
        rows += lay.num_rows
    row, doc, off, ln = (np.concatenate(x) for x in zip(*parts))
    return Layout(row, doc, off, ln, rows, seq_len)


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


def _bfd(lengths: np.ndarray, seq_len: int, repair: bool = True) -> Layout:
    if not len(lengths):
        return _empty(seq_len)
    S = seq_len
    # 1. Items: documents that fit, and the heads (len % S tokens) of longer ones.
    n_full = lengths // S
    head = lengths - n_full * S
    item_doc = np.flatnonzero(head)
    # Largest first; ties by document index. A stable sort of S - size (< S) is a
    # radix sort when it fits 16 bits, several times faster than sorting int64.
    key = S - head[item_doc]
    order = np.argsort(key.astype(np.uint16) if S <= 1 << 16 else key, kind="stable")
    item_doc = item_doc[order]
    size = head[item_doc]

    # 2. Best fit decreasing, then repair.
    item_row, n_rows = best_fit_decreasing(size, S)
    if repair:
        item_row, n_rows = _repair(size, item_row, n_rows, S)

    # 3. Assemble: item rows first (within a row, largest item first), then
    # each long document's full rows in document order, after its head.
    o = np.argsort(item_row, kind="stable")
    full_doc = np.repeat(np.arange(len(lengths), dtype=np.int64), n_full)
    n_full_rows = len(full_doc)
    row = np.concatenate([item_row[o], n_rows + np.arange(n_full_rows, dtype=np.int64)])
    doc = np.concatenate([item_doc[o], full_doc])
    off = np.concatenate([np.zeros(len(o), dtype=np.int64), head[full_doc] + _ranks(n_full) * S])
    ln = np.concatenate([size[o], np.full(n_full_rows, S, dtype=np.int64)])
    return Layout(row, doc, off, ln, n_rows + n_full_rows, S)


def _ranks(counts: np.ndarray) -> np.ndarray:
    """For counts [2, 0, 3] return [0, 1, 0, 1, 2]."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def best_fit_decreasing(size: np.ndarray, seq_len: int) -> tuple[np.ndarray, int]:
    """Best fit of items sorted largest first; returns (row of each item, rows used).

    Exactly sequential best fit (each item into the open row with the least
    free space that holds it, else a new row), computed a size class at a time.
    Items of one size s go, in turn, to the open row whose free space g >= s is
    smallest; such a row takes floor(g / s) of them before its free space drops
    below s, and every row with the same free space behaves alike. So one step
    places a whole batch: "the next u rows with free space g take k items
    each". Steps are bounded by (distinct sizes) x (distinct free spaces), not
    by the number of items: 4,000-15,000 for a million documents.

    Rows are kept in buckets by free space (a list of row ids per value);
    a Python int is a bitset over free spaces 0..seq_len with bit g set while
    bucket g is not empty, so the tightest bucket for s is the lowest set bit
    at or above s: one shift and one bit trick.
    Longer than 60 lines: one algorithm whose invariants (proved above) span its loop; split, the proof would not read with the code.
    """
    n = len(size)
    if not n:
        return np.zeros(0, dtype=np.int64), 0
    S = seq_len
    starts = np.concatenate([[0], np.flatnonzero(np.diff(size)) + 1])
    run_len = np.diff(np.append(starts, n)).tolist()
    run_size = size[starts].tolist()

    buckets: list[list[int]] = [[] for _ in range(S + 1)]  # rows by free space, a stack each
    avail = 0
    take_rows: list[list[int]] = []  # per step: the rows used, in order
    step_k: list[int] = []  # items each of them takes...
    step_last: list[int] = []  # ...except the last row, which takes this many
    n_rows = 0

    for s, c in zip(run_size, run_len):
        left = c
        while left:
            x = avail >> s
            if x:
                g = s + ((x & -x).bit_length() - 1)
                k = g // s
                b = buckets[g]
                use = min(len(b), -(-left // k))
                rows = b[-use:]
                del b[-use:]
                if not b:
                    avail ^= 1 << g
            else:  # nothing fits: open new rows
                g = S
                k = S // s
                use = -(-left // k)
                rows = list(range(n_rows, n_rows + use))
                n_rows += use
            placed = min(left, use * k)
            last = placed - (use - 1) * k
            left -= placed
            take_rows.append(rows)
            step_k.append(k)
            step_last.append(last)
            # Rows move to the bucket of their new free space (none if full).
            g1, g2 = g - k * s, g - last * s
            if g1 and use > 1:
                if not buckets[g1]:
                    avail |= 1 << g1
                buckets[g1].extend(rows[:-1])
            if g2:
                if not buckets[g2]:
                    avail |= 1 << g2
                buckets[g2].append(rows[-1])

    uses = np.fromiter(map(len, take_rows), dtype=np.int64, count=len(take_rows))
    rows = np.fromiter(itertools.chain.from_iterable(take_rows), dtype=np.int64, count=int(uses.sum()))
    per_row = np.repeat(np.asarray(step_k, dtype=np.int64), uses)
    per_row[np.cumsum(uses) - 1] = step_last
    return np.repeat(rows, per_row), n_rows


def _repair(size: np.ndarray, item_row: np.ndarray, n_rows: int, S: int) -> tuple[np.ndarray, int]:
    """Drop rows while there are more than ceil(tokens / S); returns (item_row, n_rows).

    Best fit decreasing ends with a nearly empty last row of the smallest
    items, while the other rows keep gaps smaller than any item left: no item
    fits anywhere, yet together the gaps could hold that row. Repair takes
    that row, rows with the largest gaps (enough free space to hold it twice)
    and REPAIR_ROWS full rows with the most pieces (their small items make
    exact fills possible), and packs all their items again into one row fewer
    (``_fill_rows``). If that fails it tries once more with gap rows of two
    or more pieces only: a lone item's gap is dead unless some item is that
    small. It stops at the first row it cannot drop, or after REPAIR_TRIES.
    """
    total = int(size.sum())
    lower = -(-total // S)
    if n_rows <= lower:
        return item_row, n_rows
    item_row = item_row.copy()
    for _ in range(REPAIR_TRIES):
        if n_rows <= lower:
            break
        fill = np.bincount(item_row, weights=size, minlength=n_rows).astype(np.int64)
        pieces = np.bincount(item_row, minlength=n_rows)
        for min_pieces in (1, 2):
            rows = _repair_rows(fill, pieces, S, min_pieces)
            if rows is None:
                continue
            members = np.flatnonzero(np.isin(item_row, rows))
            new = _fill_rows(size[members], S, len(rows) - 1)
            if new is not None:
                break
        else:
            break
        item_row[members] = rows[new]
        # rows left empty, at least the target, sorted. (Not np.setdiff1d: through np.unique it imports
        # numpy.ma, 23 ms in each worker's first unit, often the build's last.)
        gone = np.sort(rows[~np.isin(rows, item_row[members])])
        item_row -= np.searchsorted(gone, item_row)  # renumber the others, keeping their order
        n_rows -= len(gone)
    return item_row, n_rows


def _repair_rows(fill: np.ndarray, pieces: np.ndarray, S: int, min_pieces: int) -> np.ndarray | None:
    """Rows to pack again, or None: rows of at least ``min_pieces`` pieces
    with the largest gaps, until their free slots reach (1 + REPAIR_MARGIN) x
    the tokens of the least-filled row; REPAIR_ROWS full rows with the most
    pieces; and last the least-filled row itself, the one left empty if
    packing succeeds."""
    target = int(np.argmin(fill))
    others = np.flatnonzero(fill < S)
    others = others[(others != target) & (pieces[others] >= min_pieces)]
    others = others[np.argsort(fill[others], kind="stable")]  # largest gap first
    free = np.cumsum(S - fill[others])
    need = fill[target]  # the others must take in the target's tokens
    k = min(int(np.searchsorted(free, need * (1 + REPAIR_MARGIN))) + 1, len(others), REPAIR_GAP_ROWS)
    if not k or free[k - 1] < need:
        return None
    full = np.flatnonzero(fill == S)
    full = full[np.argsort(-pieces[full], kind="stable")[:REPAIR_ROWS]]
    return np.concatenate([others[:k], full, [target]])


def _fill_rows(size: np.ndarray, S: int, max_rows: int) -> np.ndarray | None:
    """Pack items into at most ``max_rows`` rows, each as full as possible in turn.

    Returns the row (0..max_rows-1) of each item, or None if more rows are
    needed. Each row takes the largest item left, then the subset of the
    others that fills it best (a subset sum over a Python-int bitset); among
    equally good subsets, larger items are preferred, so the small ones stay
    available for the exact fits the last rows need.
    """
    sz = size.tolist()
    left = sorted(range(len(sz)), key=lambda i: (-sz[i], i))  # largest first
    neg = [-sz[i] for i in left]  # ascending, for bisect
    row = np.empty(len(sz), dtype=np.int64)
    r = 0
    while left:
        if r == max_rows:
            return None
        first = left[0]
        cap = S - sz[first]
        full = (1 << (cap + 1)) - 1
        reach, changed = 1, []  # (item, reach before it) for the items that added a sum
        for i in left[bisect.bisect_left(neg, -cap, 1) :]:  # items of size <= cap
            if (reach >> cap) & 1:
                break  # exact fill found: smaller items are not needed
            new = reach | ((reach << sz[i]) & full)
            if new != reach:
                changed.append((i, reach))
                reach = new
        t = reach.bit_length() - 1
        take = {first}
        for i, prev in reversed(changed):
            if not (prev >> t) & 1:  # t is not reachable without item i
                take.add(i)
                t -= sz[i]
        for i in take:
            row[i] = r
            k = bisect.bisect_left(neg, -sz[i])
            while left[k] != i:  # among items of equal size
                k += 1
            del left[k], neg[k]
        r += 1
    return row
