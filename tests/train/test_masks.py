"""packer/train/masks.py: the document-causal mask, dense and as a flex-attention BlockMask."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from packer.train.masks import dense_mask, document_causal  # noqa: E402


def _ids():
    return torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2], [0, 1, 1, 1, 1, 1, 2, 2]])


def test_dense_mask_is_causal_within_each_document_only():
    ids = _ids()
    m = dense_mask(ids)
    m = m.reshape(ids.shape[0], ids.shape[1], ids.shape[1])
    for b in range(ids.shape[0]):
        for q in range(ids.shape[1]):
            for k in range(ids.shape[1]):
                assert bool(m[b, q, k]) == (k <= q and ids[b, q] == ids[b, k]), (b, q, k)


def test_the_mask_function_agrees_with_the_dense_mask():
    ids = _ids()
    fn = document_causal(ids)
    dense = dense_mask(ids).reshape(ids.shape[0], ids.shape[1], ids.shape[1])
    for b in range(ids.shape[0]):
        for q in range(ids.shape[1]):
            for k in range(ids.shape[1]):
                got = fn(torch.tensor(b), torch.tensor(0), torch.tensor(q), torch.tensor(k))
                assert bool(got) == bool(dense[b, q, k])


def test_a_floating_mask_is_additive():
    ids = _ids()
    add = dense_mask(ids, dtype=torch.float32)
    allowed = dense_mask(ids)
    assert torch.all(add[allowed] == 0) and torch.all(add[~allowed] == torch.finfo(torch.float32).min)
