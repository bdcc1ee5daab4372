"""bench/gpu_train.py's data helpers (the web-like corpus, packer builds of it, padded and packed batches,
what bench/hf_attention.py trains on) are exact. The one-GPU training plan that used them is at
commit 99450b8 (docs/benchmarks.md, "GPU training")."""

from __future__ import annotations

import numpy as np

from tests.conftest import load_script


def load_bench():
    return load_script("bench/gpu_train.py")


def test_documents_come_back_whole_from_a_packed_build(tmp_path):
    gt = load_bench()
    lengths = gt.weblike_lengths(150)
    tokens = gt.weblike_tokens(lengths, vocab=1000)
    assert (tokens[np.cumsum(lengths) - 1] == 999).all() and tokens.max() == 999
    m = gt.write_build(str(tmp_path / "b"), tokens, lengths, 256, vocab_size=1000, eos_id=999, pad_id=999,
                       name="test", unit_docs=60)
    assert len(m["shards"]) == 3 and m["totals"]["tokens"] == int(lengths.sum())
    back, back_len = gt.read_documents(str(tmp_path / "b"))
    assert np.array_equal(back_len, lengths)  # every document, whole, in order
    assert np.array_equal(back, tokens)  # every token once, in order


def test_padded_batches_hold_one_document_or_chunk_per_row(tmp_path):
    gt = load_bench()
    lengths = np.array([5, 17, 8, 40, 1, 16], dtype=np.int64)
    tokens = np.arange(int(lengths.sum()), dtype=np.int64) % 50 + 1
    L = 16
    # A: one document per row, truncated; every document appears once when rows == documents.
    (a,) = gt.padded_batches(tokens, lengths, L, len(lengths), 1, pad_id=0, chunks=False)
    kept = np.minimum(lengths, L)
    assert a["useful"] == int(kept.sum()) and a["sum_l2"] == int((kept ** 2).sum())
    ids, lab = a["input_ids"].numpy(), a["labels"].numpy()
    starts = np.cumsum(lengths) - lengths
    rows = {tuple(r[r > 0]) for r in ids}
    assert rows == {tuple(tokens[s:s + k]) for s, k in zip(starts, kept)}
    # A2: chunks of at most L; all of them once covers every token exactly once.
    n_chunks = int((-(-lengths // L)).sum())
    (b,) = gt.padded_batches(tokens, lengths, L, n_chunks, 1, pad_id=0, chunks=True)
    ids, lab = b["input_ids"].numpy(), b["labels"].numpy()
    assert b["useful"] == int(lengths.sum()) == int((ids > 0).sum())
    assert np.array_equal(np.sort(ids[ids > 0]), np.sort(tokens))
    for r in range(n_chunks):  # labels: the ids inside a chunk, -100 at slot 0 and on padding
        n = int((ids[r] > 0).sum())
        assert lab[r, 0] == -100 and (lab[r, n:] == -100).all() and np.array_equal(lab[r, 1:n], ids[r, 1:n])


def test_packed_batches_count_useful_tokens_from_the_pieces(tmp_path):
    gt = load_bench()
    from packer.train.dataset import PackedDataset
    from packer.pack import pack

    lengths = gt.weblike_lengths(60)
    gt.write_build(str(tmp_path / "b"), gt.weblike_tokens(lengths, vocab=700), lengths, 128, vocab_size=700,
                   eos_id=699, pad_id=699, name="test")
    ds = PackedDataset(str(tmp_path / "b"))
    bs = gt.packed_batches(ds, 1, len(ds))  # every row once, in the sampler's order
    pieces = pack(lengths, 128).length
    assert sum(b["useful"] for b in bs) == int(lengths.sum())  # MFU's token count: non-padding slots
    assert sum(b["sum_l2"] for b in bs) == int((pieces ** 2).sum())  # its attention term: per piece
    assert sorted(int(b["input_ids"].sum()) for b in bs) == sorted(int(ds[i]["input_ids"].sum()) for i in range(len(ds)))
    for b in bs:
        seg = np.diff(b["cu_seqlens"].numpy())
        assert seg.sum() == b["input_ids"].numel() and b["useful"] <= seg.sum()
