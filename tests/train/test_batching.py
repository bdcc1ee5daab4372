"""collate, boundaries and masks: against doc_lens, and against documents run alone."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from packer import PackedDataset, block_mask, collate, dense_mask
from packer.train.batching import boundaries, collate_padding_free, padding_free

from tests.conftest import REPO, load_script

EXAMPLE = os.path.join(REPO, "examples", "train_gpt.py")


def load_example():
    return load_script("examples/train_gpt.py")


@pytest.fixture(scope="module")
def ds(sample_build):
    return PackedDataset(sample_build)


def segments(rows, L):
    """Segment lengths of rows, the obvious way: pieces, then the padding tail if any."""
    out = []
    for r in rows:
        lens = r["doc_lens"].tolist()
        out += lens + ([L - sum(lens)] if sum(lens) < L else [])
    return np.array(out)


def check_batch(batch, rows, L):
    seg = segments(rows, L)
    B = len(rows)
    np.testing.assert_array_equal(batch["cu_seqlens"].numpy(), np.concatenate([[0], np.cumsum(seg)]))
    assert batch["cu_seqlens"].dtype == torch.int32 and batch["document_ids"].dtype == torch.int32
    np.testing.assert_array_equal(batch["document_ids"].numpy(), np.repeat(np.arange(len(seg)), seg).reshape(B, L))
    assert batch["max_seqlen"] == seg.max() and isinstance(batch["max_seqlen"], int)
    for k in ("input_ids", "labels", "position_ids"):
        assert batch[k].shape == (B, L) and torch.equal(batch[k], torch.stack([r[k] for r in rows]))


def test_boundaries_agree_with_doc_lens_for_every_row(ds):
    L = ds.seq_len
    for a in range(0, len(ds), 64):
        idx = list(range(a, min(a + 64, len(ds))))
        rows = ds.__getitems__(idx)  # the DataLoader path
        check_batch(collate(rows), rows, L)
        if a % 1024 == 0:
            single = [ds[i] for i in idx]  # ds[i] rows, stacked
            check_batch(collate(single), single, L)
    full = [i for i in range(2000) if ds[i]["doc_lens"].tolist() == [L]][:8]  # a batch of one-piece rows
    rows = ds.__getitems__(full)
    check_batch(collate(rows), rows, L)


def test_collate_reuses_a_batch_built_by_getitems_and_stacks_anything_else(ds):
    rows = ds.__getitems__([5, 900, 77, 3000])
    b = collate(rows)
    assert b["input_ids"].data_ptr() == rows[0]["input_ids"].data_ptr()  # no second copy
    rev = collate(rows[::-1])  # same tensors, another order: must be stacked
    for k in ("input_ids", "labels", "position_ids"):
        assert torch.equal(rev[k], b[k].flip(0))
    part = collate(rows[1:3])
    assert torch.equal(part["input_ids"], b["input_ids"][1:3])
    with pytest.raises(ValueError):
        collate([])


def test_boundaries_of_a_hand_made_batch():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 4]])
    doc, cu, mx = boundaries(pos)
    assert doc.tolist() == [[0, 0, 0, 1, 1, 2], [3, 4, 4, 4, 4, 4]]
    assert cu.tolist() == [0, 3, 5, 6, 7, 12] and mx == 5


def test_dense_mask_is_same_document_and_causal(ds):
    b = collate(ds.__getitems__([0, 1, 2, 3]))
    m = dense_mask(b)
    B, L = b["document_ids"].shape
    assert m.shape == (B, 1, L, L) and m.dtype == torch.bool
    doc = b["document_ids"]
    q, k = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    for i in range(B):
        want = (doc[i][:, None] == doc[i][None, :]) & (k <= q)
        assert torch.equal(m[i, 0], want)
    assert m.diagonal(dim1=-2, dim2=-1).all()  # every slot sees itself: no empty softmax row


def _rows_with_boundaries(ds):
    """Two rows: one with at least 3 pieces, one with 2 or more pieces and padding."""
    many = padded = None
    for i in range(len(ds)):
        lens = ds[i]["doc_lens"]
        if many is None and len(lens) >= 3:
            many = i
        if padded is None and len(lens) >= 2 and lens.sum() < ds.seq_len:
            padded = i
        if many is not None and padded is not None:
            return [many, padded]
    raise AssertionError("the sample build lacks rows with several pieces and padding")


@pytest.mark.parametrize("kind", ["dense", "flex"])
def test_packed_losses_equal_each_document_alone(ds, kind):
    """Per-token losses of a packed batch under the document mask equal those of every
    document piece run alone (positions from 0, plain causal attention)."""
    ex = load_example()
    torch.manual_seed(0)
    model = ex.GPT(ex.GPTConfig(ds.vocab_size, d_model=32, n_layers=2, n_heads=2)).eval()
    rows = [ds[i] for i in _rows_with_boundaries(ds)]
    batch = collate(rows)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex on CPU warns that it runs unfused
        packed = ex.token_losses(model(batch["input_ids"], batch["position_ids"], ex.make_mask(batch, kind, torch.device("cpu"))), batch["labels"])
        control = ex.token_losses(
            model(batch["input_ids"], torch.arange(ds.seq_len).expand(len(rows), -1), ex.make_mask(batch, "causal", torch.device("cpu"))),
            batch["labels"],
        )
        checked = worst_control = 0
        for b, r in enumerate(rows):
            s = 0
            for n in r["doc_lens"].tolist():
                x = r["input_ids"][s:s + n][None]
                alone = F.cross_entropy(model(x, torch.arange(n)[None], ex.make_mask({}, "causal", None))[0, :-1], x[0, 1:], reduction="none")
                torch.testing.assert_close(packed[b, s:s + n - 1], alone, rtol=1e-4, atol=1e-5)
                if s + n < ds.seq_len:
                    assert packed[b, s + n - 1] == 0  # the last token of a piece predicts nothing
                checked += n - 1
                if s > 0 and n > 1:
                    worst_control = max(worst_control, float((control[b, s:s + n - 1] - alone).abs().max()))
                s += n
            assert torch.all(packed[b, s:] == 0)  # padding neither predicts nor is predicted
    assert checked > 100
    assert worst_control > 1e-2  # without the mask and positions the losses differ: the check can fail


def test_padding_free_row_equals_the_batch(ds):
    """One row of B*L (the HF padding-free layout) with the same mask gives the same losses."""
    ex = load_example()
    torch.manual_seed(0)
    model = ex.GPT(ex.GPTConfig(ds.vocab_size, d_model=32, n_layers=2, n_heads=2)).eval()
    batch = collate([ds[i] for i in _rows_with_boundaries(ds)])
    flat = padding_free(batch, flash_kwargs=True)
    B, L = batch["input_ids"].shape
    assert flat["input_ids"].shape == (1, B * L) and flat["cu_seq_lens_q"] is batch["cu_seqlens"]
    assert flat["max_length_k"] == batch["max_seqlen"]
    with torch.no_grad():
        a = ex.token_losses(model(batch["input_ids"], batch["position_ids"], ex.make_mask(batch, "dense", None)), batch["labels"])
        one = {"document_ids": batch["document_ids"].reshape(1, -1)}
        f = ex.token_losses(model(flat["input_ids"], flat["position_ids"], ex.make_mask(one, "dense", None)), flat["labels"])
    f = torch.cat([f, f.new_zeros(1, 1)], 1).view(B, L)[:, :-1]  # back to rows
    torch.testing.assert_close(a, f, rtol=1e-4, atol=1e-5)


def test_block_mask_matches_dense_mask(ds):
    b = collate(ds.__getitems__(_rows_with_boundaries(ds)))
    bm = block_mask(b, block_size=64)
    B, L = b["input_ids"].shape
    assert bm.shape == (B, 1, L, L)
    want = dense_mask(b)
    q, k = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    got = torch.stack([bm.mask_mod(torch.tensor(i), 0, q, k) for i in range(B)])[:, None]
    assert torch.equal(got, want)
    # blocks the mask skips hold no allowed pair
    dense_blocks = bm.to_dense()  # (B, 1, L/64, L/64): 1 where a block is computed
    allowed = want.view(B, 1, L // 64, 64, L // 64, 64).any(-1).any(-2)
    assert torch.all(dense_blocks.bool() | ~allowed)


def test_hf_transformers_padding_free(ds):
    """The snippet of docs/dataset.md: an HF model on one row of B*L, no attention_mask,
    gives each document's losses as if it ran alone."""
    transformers = pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=ds.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=ds.seq_len)
    model = LlamaForCausalLM(cfg).eval()
    rows = [ds[i] for i in _rows_with_boundaries(ds)]
    inputs = collate_padding_free(rows)  # input_ids, labels, position_ids: (1, B*L)
    with torch.no_grad():
        out = model(**inputs)  # the batch carries use_cache=False
        V = out.logits.shape[-1]
        per_token = F.cross_entropy(out.logits[0, :-1], inputs["labels"][0, 1:], ignore_index=-100, reduction="none")
        assert torch.allclose(out.loss, per_token.sum() / (inputs["labels"][0, 1:] != -100).sum(), atol=1e-5)
        s = 0
        for r in rows:
            off = 0
            for n in r["doc_lens"].tolist():
                x = r["input_ids"][off:off + n][None]
                alone = model(input_ids=x, use_cache=False).logits[0, :-1].reshape(-1, V)
                torch.testing.assert_close(per_token[s + off:s + off + n - 1], F.cross_entropy(alone, x[0, 1:], reduction="none"),
                                           rtol=1e-4, atol=1e-5)
                off += n
            s += ds.seq_len
    assert transformers.__version__


def test_whole_rows_first_is_the_same_batch_reordered(ds):
    """One-document rows first, the rest in order; every row intact, boundaries found again."""
    from packer.train.batching import whole_rows_first

    n = [int((ds[i]["position_ids"] == 0).sum()) for i in range(min(len(ds), 400))]  # segments
    pick = [i for i in range(len(n)) if n[i] > 1][:2] + [i for i in range(len(n)) if n[i] == 1][:1]
    pick = pick[:1] + pick[2:] + pick[1:2] if len(pick) == 3 else pick  # several, one, several
    if len(pick) < 3:
        pytest.skip("the sample build has no one-document row")
    b = collate([ds[i] for i in pick])
    got = whole_rows_first(b)
    order = [1, 0, 2]
    for k in ("input_ids", "labels", "position_ids"):
        assert torch.equal(got[k], b[k][order])
    want = collate([ds[pick[i]] for i in order])
    for k in ("document_ids", "cu_seqlens"):
        assert torch.equal(got[k], want[k])
    assert got["max_seqlen"] == want["max_seqlen"]


def test_whole_rows_first_refuses_a_batch_without_rows_of_positions():
    from packer.errors import PackerError
    from packer.train.batching import whole_rows_first

    with pytest.raises(PackerError, match="position_ids"):
        whole_rows_first({"input_ids": torch.zeros(2, 4, dtype=torch.long)})
    with pytest.raises(PackerError, match="position_ids"):
        whole_rows_first({"position_ids": torch.arange(8)})  # one flat row
