"""pack: lengths -> layout. Property tests over random lengths and seq_lens.

The core check materialises every slot of every row as (document, token
index) and reads the rows back in order: each document's tokens must come out
exactly once, as 0, 1, ..., len - 1, and no row may hold more than seq_len.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packer.pack import MODES, Layout, best_fit_decreasing, pack

P = importlib.import_module("packer.pack")  # the module (packer.pack is also the function's name)


def check_layout(lengths, seq_len: int, lay: Layout) -> None:
    """Every property a layout must have, whatever the mode."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    assert lay.seq_len == seq_len
    for a in (lay.row, lay.doc, lay.offset, lay.length):
        assert a.dtype == np.int64 and a.shape == lay.row.shape
    if not len(lay.row):
        assert n == 0 or lengths.sum() == 0
        assert lay.num_rows == 0
        return
    assert np.all(np.diff(lay.row) >= 0), "pieces are ordered by row"
    assert lay.row.min() >= 0 and lay.row.max() < lay.num_rows
    assert np.all(lay.length >= 1)
    fill = np.bincount(lay.row, weights=lay.length, minlength=lay.num_rows)
    assert fill.max() <= seq_len, "no row exceeds seq_len"
    assert fill.min() > 0, "no row is all padding"
    assert lay.padding == lay.num_rows * seq_len - lengths.sum()
    slot = lay.slot
    assert np.all(slot >= 0) and np.all(slot + lay.length <= seq_len)

    # Materialise the slots: which (document, token) sits in each one.
    total = lay.num_rows * seq_len
    grid_doc = np.full(total, -1, dtype=np.int64)
    grid_tok = np.full(total, -1, dtype=np.int64)
    start = lay.row * seq_len + slot
    step = np.arange(int(lay.length.sum())) - np.repeat(np.cumsum(lay.length) - lay.length, lay.length)
    dst = np.repeat(start, lay.length) + step
    assert np.bincount(dst, minlength=total).max() <= 1, "two pieces overlap"
    grid_doc[dst] = np.repeat(lay.doc, lay.length)
    grid_tok[dst] = np.repeat(lay.offset, lay.length) + step
    # Read the rows back in order. Name each token by its place in the corpus
    # (document start + index): each must appear exactly once, and within a
    # document, token i + 1 must be read after token i.
    used = grid_doc >= 0
    d, t = grid_doc[used], grid_tok[used]
    assert np.all((t >= 0) & (t < lengths[d])), "token index inside its document"
    firsts = np.cumsum(lengths) - lengths
    key = firsts[d] + t
    assert np.array_equal(np.bincount(key, minlength=int(lengths.sum())), np.ones(int(lengths.sum()))), (
        "every token exactly once"
    )
    read_at = np.empty(len(key), dtype=np.int64)
    read_at[key] = np.arange(len(key))
    follows = np.ones(len(key), dtype=bool)  # token k + 1 is in the same document as token k
    follows[firsts[1:] - 1] = False
    follows[-1] = False
    assert np.all(read_at[1:][follows[:-1]] > read_at[:-1][follows[:-1]]), "tokens in order across pieces"


def pieces_per_doc(lay: Layout, n: int) -> np.ndarray:
    return np.bincount(lay.doc, minlength=n)


def lengths_and_seq_len(max_seq: int = 96, max_docs: int = 120):
    """Length lists that mix tiny, fitting, exactly-fitting and long documents."""

    @st.composite
    def build(draw):
        seq_len = draw(st.integers(1, max_seq))
        doc = st.one_of(
            st.integers(1, max(1, seq_len // 4)),
            st.integers(1, seq_len),
            st.just(seq_len),
            st.integers(seq_len, 5 * seq_len + 3),
        )
        return draw(st.lists(doc, max_size=max_docs)), seq_len

    return build()


@settings(max_examples=300, deadline=None)
@given(lengths_and_seq_len())
def test_bfd_properties(case):
    lengths, seq_len = case
    lay = pack(lengths, seq_len)
    check_layout(lengths, seq_len, lay)
    L = np.asarray(lengths, dtype=np.int64)
    k = pieces_per_doc(lay, len(L))
    # No document that fits in a row is split; longer ones get the fewest pieces.
    assert np.array_equal(k, np.maximum(1, -(-L // seq_len))) if len(L) else True


@settings(max_examples=200, deadline=None)
@given(lengths_and_seq_len())
def test_concat_properties(case):
    lengths, seq_len = case
    lay = pack(lengths, seq_len, "concat")
    check_layout(lengths, seq_len, lay)
    total = sum(lengths)
    assert lay.num_rows == -(-total // seq_len)  # padding only in the last row
    assert lay.padding < seq_len or total == 0


@settings(max_examples=150, deadline=None)
@given(lengths_and_seq_len(), st.integers(1, 400), st.sampled_from(MODES))
def test_windowed_properties(case, window, mode):
    lengths, seq_len = case
    lay = pack(lengths, seq_len, mode, window=window)
    check_layout(lengths, seq_len, lay)
    if mode == "bfd" and lengths:
        L = np.asarray(lengths, dtype=np.int64)
        assert np.array_equal(pieces_per_doc(lay, len(L)), np.maximum(1, -(-L // seq_len)))


@settings(max_examples=100, deadline=None)
@given(lengths_and_seq_len(), st.sampled_from(MODES))
def test_deterministic(case, mode):
    lengths, seq_len = case
    a = pack(lengths, seq_len, mode)
    b = pack(np.array(lengths, dtype=np.int32), seq_len, mode)  # other container, same lengths
    for x, y in zip((a.row, a.doc, a.offset, a.length), (b.row, b.doc, b.offset, b.length)):
        assert np.array_equal(x, y)
    assert a.num_rows == b.num_rows


def _naive_best_fit(sizes, seq_len):
    """Textbook best fit, one item at a time: the reference for the batched version."""
    gaps = []
    for s in sizes:
        fits = [j for j, g in enumerate(gaps) if g >= s]
        if fits:
            j = min(fits, key=lambda j: gaps[j])
        else:
            gaps.append(seq_len)
            j = len(gaps) - 1
        gaps[j] -= s
    return sorted(gaps)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 80), st.data())
def test_batched_best_fit_is_best_fit(seq_len, data):
    """Placing a size class at a time gives exactly sequential best fit decreasing
    (row gaps equal as multisets: rows with equal gaps are interchangeable)."""
    sizes = sorted(data.draw(st.lists(st.integers(1, seq_len), max_size=150)), reverse=True)
    rows, n_rows = best_fit_decreasing(np.array(sizes, dtype=np.int64), seq_len)
    fill = np.bincount(rows, weights=sizes, minlength=n_rows) if sizes else np.zeros(0)
    assert sorted((seq_len - fill).astype(int).tolist()) == _naive_best_fit(sizes, seq_len)


def test_repair_reaches_the_bound_best_fit_misses():
    # 114 tokens = exactly 3 rows of 38; best fit decreasing needs 4.
    lengths, seq_len = [19, 14, 5, 14, 7, 33, 5, 17], 38
    assert P._bfd(np.array(lengths), seq_len, repair=False).num_rows == 4
    lay = pack(lengths, seq_len)
    check_layout(lengths, seq_len, lay)
    assert lay.num_rows == 3 and lay.padding == 0


@settings(max_examples=150, deadline=None)
@given(lengths_and_seq_len())
def test_repair_never_adds_rows(case):
    lengths, seq_len = case
    plain = P._bfd(np.array(lengths, dtype=np.int64), seq_len, repair=False) if lengths else None
    lay = pack(lengths, seq_len)
    if plain is not None:
        assert lay.num_rows <= plain.num_rows
        assert lay.num_rows >= -(-sum(lengths) // seq_len)


def test_long_document_head_then_full_rows():
    # 2 * 8 + 3 tokens: a 3-token head packed with the short document, then 2 full rows.
    lay = pack([19, 5], 8)
    check_layout([19, 5], 8, lay)
    assert lay.num_rows == 3 and lay.padding == 0
    got = sorted(zip(lay.doc.tolist(), lay.offset.tolist(), lay.length.tolist()))
    assert got == [(0, 0, 3), (0, 3, 8), (0, 11, 8), (1, 0, 5)]


def test_windows_pack_independently():
    lengths = [5, 5, 5, 5, 5, 5]
    lay = pack(lengths, 10, window=10)  # windows of 10 tokens: two documents each
    check_layout(lengths, 10, lay)
    assert lay.num_rows == 3
    for r in range(3):
        assert set(lay.doc[lay.row == r].tolist()) == {2 * r, 2 * r + 1}
    whole = pack(lengths, 10, window=10_000)
    assert np.array_equal(whole.row, pack(lengths, 10).row)


def test_window_bounds_are_balanced():
    assert P.window_bounds(np.array([5] * 6), 10).tolist() == [0, 2, 4, 6]
    # 31 tokens, windows of at most ~10: four windows of ~8 tokens, not 10 + 10 + 10 + 1.
    assert P.window_bounds(np.array([4] * 7 + [3]), 10).tolist() == [0, 2, 4, 6, 8]
    # A document longer than the window is a window of its own.
    assert P.window_bounds(np.array([100, 1, 1]), 10).tolist() == [0, 1, 3]
    assert P.window_bounds(np.array([3, 3]), 100).tolist() == [0, 2]


def test_default_window_bounds_working_set():
    """More tokens than DEFAULT_WINDOW: packed as separate windows by default."""
    lengths = np.full(300, 1_000_003, dtype=np.int64)  # 3e8 tokens: three windows
    lay = pack(lengths, 2048)
    same = pack(lengths, 2048, window=P.DEFAULT_WINDOW)
    assert np.array_equal(lay.row, same.row) and np.array_equal(lay.doc, same.doc)
    bounds = P.window_bounds(lengths, P.DEFAULT_WINDOW)
    assert len(bounds) - 1 == 3
    # Rows of a window hold only its documents, and windows follow each other.
    win = np.searchsorted(bounds, lay.doc, side="right") - 1
    assert np.all(np.diff(win) >= 0)
    k = np.bincount(lay.doc, minlength=len(lengths))
    assert np.array_equal(k, -(-lengths // 2048))


def test_empty_and_errors():
    lay = pack([], 16)
    assert lay.num_rows == 0 and lay.padding == 0 and len(lay.slot) == 0
    with pytest.raises(ValueError, match="at least one token"):
        pack([3, 0], 16)
    with pytest.raises(ValueError, match="seq_len"):
        pack([3], 0)
    with pytest.raises(ValueError, match="unknown pack mode"):
        pack([3], 16, "ffd")
    with pytest.raises(ValueError, match="window"):
        pack([3], 16, window=0)
    with pytest.raises(ValueError, match="one-dimensional"):
        pack([[3]], 16)


def test_large_input_fast_path_keeps_properties():
    """Many documents (size classes with many rows each): the batched steps still
    give a valid layout with the fewest pieces, and padding below 0.1%."""
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, np.round(rng.lognormal(np.log(600), 1.0, 8_000))).astype(np.int64) + 1
    for seq_len in (2048, 8192):
        lay = pack(lengths, seq_len)
        check_layout(lengths, seq_len, lay)
        assert np.array_equal(pieces_per_doc(lay, len(lengths)), np.maximum(1, -(-lengths // seq_len)))
        assert lay.padding / (lay.num_rows * seq_len) < 1e-3
