"""packer.train.hf: the document-causal attention for HF transformers, the padding-free
checks, and the additive dense mask for eager attention. CPU, tiny Llama from a config."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from packer import PackedDataset
from packer.errors import PackerError
from packer.train.batching import collate, collate_padding_free
from packer.train.hf import check_padding_free, packer_attention, segments_of
from packer.train.masks import dense_mask

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


@pytest.fixture(scope="module")
def ds(short_docs_build):
    return PackedDataset(short_docs_build)


def many_docs(ds, k=3):
    """The k rows with the most pieces among the first 300 (so documents can mix)."""
    n = [len(ds[i]["doc_lens"]) for i in range(min(len(ds), 300))]
    out = [int(i) for i in np.argsort(n)[::-1][:k]]
    assert n[out[0]] >= 3
    return out


def tiny(ds, attn="sdpa", seed=0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=ds.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=ds.seq_len)
    m = LlamaForCausalLM(cfg)  # config default: use_cache=True
    m.set_attn_implementation(attn)
    return m


def alone(model, ids, pos):
    """(N, V) logits of every segment of the flat (N,) ids run alone through sdpa."""
    impl = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    cu, _ = segments_of(pos.reshape(1, -1).clone())
    out = torch.cat([model(input_ids=ids.reshape(-1)[a:b][None], use_cache=False).logits[0]
                     for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())])
    model.set_attn_implementation(impl)
    return out


@pytest.mark.parametrize("layout", ["rows", "padding_free", "flash_kwargs"])
def test_packer_attention_equals_documents_alone(ds, layout):
    """Logits and gradients of packed rows equal those of each document run alone, with the
    model left at use_cache=True; the control (sdpa with that cache) mixes documents."""
    model = tiny(ds, packer_attention())
    rows = [ds[i] for i in many_docs(ds, 2)]
    if layout == "rows":
        b = collate(rows)
        inputs = {k: b[k] for k in ("input_ids", "labels", "position_ids")}
    else:
        inputs = collate_padding_free(rows, flash_kwargs=layout == "flash_kwargs")
        inputs.pop("use_cache")  # the model's default (True) must not matter here
    out = model(**inputs)
    out.loss.backward()
    g_packed = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    ids, pos, lab = inputs["input_ids"], inputs["position_ids"], inputs["labels"]
    ref = alone(model, ids, pos)
    torch.testing.assert_close(out.logits.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)
    # the same loss from documents alone: mean over the labelled tokens of the flat batch
    flat_lab = lab.reshape(-1)
    nxt = torch.cat([flat_lab[1:], flat_lab.new_full((1,), -100)])
    starts = torch.zeros_like(flat_lab, dtype=torch.bool)
    starts[::ids.shape[-1]] = True  # HF shifts per row: a row's last slot predicts nothing
    nxt[torch.roll(starts, -1)] = -100
    model.set_attn_implementation("sdpa")
    ref = alone(model, ids, pos)
    F.cross_entropy(ref, nxt, ignore_index=-100).backward()
    for a, b in zip(g_packed, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)

    mixed = tiny(ds, "sdpa")(**{k: v for k, v in inputs.items() if k in ("input_ids", "position_ids")}).logits
    assert (mixed.reshape(ref.shape) - ref).abs().max() > 1e-3  # with a cache, sdpa finds no documents


def test_packer_attention_refuses_what_it_cannot_do(ds):
    model = tiny(ds, packer_attention()).eval()
    b = collate([ds[i] for i in many_docs(ds, 2)])
    mask = torch.ones_like(b["input_ids"])
    mask[0, -3:] = 0
    with pytest.raises(PackerError, match="attention_mask"):
        model(input_ids=b["input_ids"], position_ids=b["position_ids"], attention_mask=mask)
    ids = b["input_ids"][:1, :8]
    with torch.no_grad():
        past = model(input_ids=ids, use_cache=True).past_key_values
        with pytest.raises(PackerError, match="generation"):
            model(input_ids=ids[:, -1:], past_key_values=past, use_cache=True)
    with pytest.raises(PackerError, match="unknown attention kernel"):
        packer_attention("cudnn")


def test_two_models_two_kernels_in_one_process(ds):
    """Each kernel registers a name whose function carries it: registering a second kernel does not
    change the first model's (issue 28: a process-wide kernel did)."""
    from packer.train import hf

    exact = tiny(ds, packer_attention("sdpa"))
    forced = tiny(ds, packer_attention("torch_varlen"))  # registered after: must not leak into `exact`
    auto = tiny(ds, packer_attention())
    names = {m.config._attn_implementation for m in (exact, forced, auto)}
    assert names == {"packer_varlen_sdpa", "packer_varlen_torch_varlen", hf.NAME}
    b = collate([ds[i] for i in many_docs(ds, 2)])
    with torch.no_grad():
        for m in (exact, auto):
            got = m(input_ids=b["input_ids"], position_ids=b["position_ids"]).logits
            ref = alone(m, b["input_ids"], b["position_ids"])
            torch.testing.assert_close(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)
        with pytest.raises(PackerError, match="'torch_varlen' runs on CUDA only"):  # its own kernel, on CPU
            forced(input_ids=b["input_ids"], position_ids=b["position_ids"])
    assert packer_attention("sdpa") == "packer_varlen_sdpa" and hf._forward_for("sdpa") is hf._forward_for("sdpa")


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_readme_loader_batch_into_an_hf_model_at_its_defaults(ds, impl):
    """issue 30.3: the README's PackedLoader batch, fed as model(**batch) to an HF model as it comes
    (use_cache on), keeps documents apart: the batch says use_cache=False, without which transformers
    skips finding them. The same batch still feeds a plain PyTorch model its tensors."""
    from packer import PackedLoader, PackedSampler

    batch = next(iter(PackedLoader(ds, batch_size=4, sampler=PackedSampler(ds, seed=0, rank=0, world_size=1))))
    assert int((batch["position_ids"] == 0).sum()) > 4  # several documents a row: mixing was possible
    model = tiny(ds, impl).eval()
    assert model.config.use_cache
    with torch.no_grad():
        out = model(**batch)
        ref = alone(model, batch["input_ids"], batch["position_ids"])
        mixed = model(**{k: v for k, v in batch.items() if k != "use_cache"}).logits
    torch.testing.assert_close(out.logits.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)
    assert (mixed.reshape(ref.shape) - ref).abs().max() > 1e-3  # the control: with a cache they mix
    assert torch.isfinite(out.loss)

    class Plain(torch.nn.Module):  # a model of one's own, reading the batch's tensors
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(ds.vocab_size, 8)

        def forward(self, input_ids, labels, position_ids, document_ids, **rest):
            return self.emb(input_ids).sum() + (document_ids[:, :1] * 0).sum()

    assert torch.isfinite(Plain()(**batch))


def test_padding_free_refuses_old_transformers():
    with pytest.raises(PackerError, match="4.53.1"):
        check_padding_free("4.53.0")
    with pytest.raises(PackerError):
        check_padding_free("4.44.2")
    check_padding_free("4.53.1")
    check_padding_free("5.0.0.dev0")


def test_dense_mask_additive_through_eager(ds):
    """eager adds the mask to the scores: the float dense mask isolates documents, a bool one does not."""
    model = tiny(ds, "eager").eval()
    b = collate([ds[i] for i in many_docs(ds, 2)])
    with torch.no_grad():
        ref = alone(model, b["input_ids"], b["position_ids"])
        got = model(input_ids=b["input_ids"], position_ids=b["position_ids"],
                    attention_mask=dense_mask(b, dtype=torch.float32)).logits
        torch.testing.assert_close(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)
        bad = model(input_ids=b["input_ids"], position_ids=b["position_ids"], attention_mask=dense_mask(b)).logits
    assert (bad.reshape(ref.shape) - ref).abs().max() > 1e-3
    m = dense_mask(b, dtype=torch.bfloat16)
    assert m.dtype == torch.bfloat16 and m.shape == dense_mask(b).shape
    assert torch.equal(m == 0, dense_mask(b))


def test_boundaries_found_once_a_forward_and_renewed_for_new_positions(ds):
    """The per-forward memo of the boundaries never serves a stale batch: a new position_ids
    tensor, or the same one changed in place, gives logits equal to documents run alone."""
    model = tiny(ds, packer_attention())
    rows = [ds[i] for i in many_docs(ds, 2)]
    b = collate(rows)
    ids, pos = b["input_ids"], b["position_ids"].clone()
    with torch.no_grad():
        model(input_ids=ids, position_ids=pos)
        flat = torch.arange(ids.numel()).reshape(ids.shape) % ids.shape[1]  # one document a row
        for p in (flat, pos.copy_(flat)):  # a new tensor; then the first changed in place
            got = model(input_ids=ids, position_ids=p).logits
            want = torch.cat([model.__class__.forward(model, input_ids=ids[r:r + 1], use_cache=False).logits
                              for r in range(ids.shape[0])])
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_whole_rows_go_dense_and_the_rest_varlen_exactly(ds, monkeypatch):
    """The CUDA dispatch, run on CPU: rows that are one document each go to the dense causal
    kernel, runs of the other rows to the varlen kernel (here an exact per-segment stand-in);
    logits equal documents alone, gradients equal the one-kernel path's, and each kernel got
    the rows it should."""
    from packer.train import hf

    model = tiny(ds, packer_attention())
    b = collate([ds[i] for i in many_docs(ds, 3)] + [ds[many_docs(ds, 1)[0]]])
    ids, pos, lab = b["input_ids"], b["position_ids"].clone(), b["labels"]
    T = ids.shape[1]
    pos[1] = torch.arange(T)  # rows 1 and 2: one document each; rows 0 and 3: several
    pos[2] = torch.arange(T)

    def run():
        model.zero_grad()
        out = model(input_ids=ids, position_ids=pos, labels=lab)
        out.loss.backward()
        return out.logits.detach(), [p.grad.clone() for p in model.parameters()]

    want_logits, want_grads = run()  # the exact per-segment path (CPU)
    calls = []

    def varlen(q, k, v, cu, mx, scale):
        calls.append(("varlen", q.shape[0]))
        assert cu[0] == 0 and cu[-1] == q.shape[0] and mx == int((cu[1:] - cu[:-1]).max())
        return hf._per_segment(q, k, v, cu, scale)

    dense = hf._dense_causal

    def dense_spy(q, k, v, rows, T, scale):
        calls.append(("dense", rows))
        return dense(q, k, v, rows, T, scale)

    monkeypatch.setattr(hf, "_pick", lambda q, kernel: "torch_varlen")
    monkeypatch.setitem(hf._KERNEL_FNS, "torch_varlen", varlen)
    monkeypatch.setattr(hf, "_dense_causal", dense_spy)
    got_logits, got_grads = run()
    layers = model.config.num_hidden_layers
    assert calls == [("dense", 2), ("varlen", 2 * T)] * layers  # rows 1, 2 dense; rows 0, 3 together
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-4, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    with torch.no_grad():
        ref = alone(model, ids, pos)
    torch.testing.assert_close(got_logits.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)


def test_whole_rows_in_power_of_two_chunks_are_exact_forward_and_backward(ds, monkeypatch):
    """Three whole rows go dense as chunks of 2 and 1 (one cuDNN plan per power of two), a run of
    them straddling the two chunks; logits and gradients equal the one-kernel (per-segment) path."""
    from packer.train import hf

    model = tiny(ds, packer_attention())
    rows = many_docs(ds, 3)
    b = collate([ds[rows[i % len(rows)]] for i in range(6)])
    ids, pos, lab = b["input_ids"], b["position_ids"].clone(), b["labels"]
    T = ids.shape[1]
    for r in (0, 2, 3):  # whole rows: runs (0,1) and (2,4); the second spans chunk 0's row 1 and chunk 1
        pos[r] = torch.arange(T)

    def run():
        model.zero_grad()
        out = model(input_ids=ids, position_ids=pos, labels=lab)
        out.loss.backward()
        return out.logits.detach(), [p.grad.clone() for p in model.parameters()]

    want_logits, want_grads = run()
    calls = []
    dense = hf._dense_causal
    monkeypatch.setattr(hf, "_pick", lambda q, kernel: "torch_varlen")
    monkeypatch.setitem(hf._KERNEL_FNS, "torch_varlen", lambda q, k, v, cu, mx, s: hf._per_segment(q, k, v, cu, s))
    monkeypatch.setattr(hf, "_dense_causal", lambda q, k, v, n, T, s: calls.append(n) or dense(q, k, v, n, T, s))
    got_logits, got_grads = run()
    assert calls == [2, 1] * model.config.num_hidden_layers
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-4, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_row_groups_put_whole_rows_first_and_renumber_the_rest():
    from packer.train.row_groups import RowGroups

    # 4 rows of 4: [2, 2], [4], [4], [1, 3]
    g = RowGroups.of(torch.tensor([0, 2, 4, 8, 12, 13, 16], dtype=torch.int32), B=4, T=4)
    assert (g.n_whole, g.mixed) == (2, True)
    assert g.runs == [(0, 1, False, 0), (1, 3, True, 0), (3, 4, False, 1)]
    assert g.cu.tolist() == [0, 2, 4, 5, 8] and g.mx == 3
    assert g.chunks == [2]
    assert [RowGroups(B=32, T=4, n_whole=n).chunks for n in (27, 16, 1)] == [[16, 8, 2, 1], [16], [1]]
    assert not RowGroups.of(torch.tensor([0, 4, 8], dtype=torch.int32), B=2, T=4).mixed  # all whole


def test_one_document_rows_in_many_runs_go_varlen_with_the_rest(ds, monkeypatch):
    """More than MAX_RUNS runs of rows (rows in sampler order) and too few whole rows to pay
    (split_pays): one varlen call for the batch, since the copies of many runs cost more than
    the dense kernel saves (docs/benchmarks.md)."""
    from packer.train import hf

    calls = _spy_varlen(monkeypatch, hf)
    monkeypatch.setattr(hf, "_dense_causal", lambda *a: calls.append(("dense",)) or pytest.fail("dense called"))
    model, ids, T, got, ref = _alternating_runs(ds, hf)
    assert calls == [("varlen", ids.numel())] * model.config.num_hidden_layers
    torch.testing.assert_close(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)


def _spy_varlen(monkeypatch, hf) -> list:
    """The CUDA dispatch on CPU: the varlen kernel is an exact per-segment stand-in that logs its calls."""
    calls = []
    monkeypatch.setattr(hf, "_pick", lambda q, kernel: "torch_varlen")
    monkeypatch.setitem(hf._KERNEL_FNS, "torch_varlen",
                        lambda q, k, v, cu, mx, s: calls.append(("varlen", q.shape[0])) or hf._per_segment(q, k, v, cu, s))
    return calls


def _alternating_runs(ds, hf):
    """A batch of 2 * MAX_RUNS rows, whole and several-document in turn, through a tiny model:
    (model, ids, T, logits, logits of each document alone)."""
    model = tiny(ds, packer_attention())
    rows = many_docs(ds, 3)
    b = collate([ds[rows[i % len(rows)]] for i in range(2 * hf.MAX_RUNS)])
    ids, pos = b["input_ids"], b["position_ids"].clone()
    T = ids.shape[1]
    pos[1::2] = torch.arange(T)  # whole, several, whole, ...: 2 * MAX_RUNS runs
    with torch.no_grad():
        return model, ids, T, model(input_ids=ids, position_ids=pos).logits, alone(model, ids, pos)


def test_split_pays_where_it_measured_faster():
    """The rule against the H200 figures it was drawn from (docs/benchmarks.md, issue 30.4): web-like
    rows at 2048 in sampler order stay on varlen; real text's mostly-whole batches, and 8192, split."""
    from packer.train.hf import split_pays

    assert not split_pays(15, 16, 2048)  # web-like, 2048: ~15 whole rows in ~16 runs
    assert split_pays(27, 9, 2048)  # real text, 2048
    assert split_pays(1, 5, 8192) and split_pays(5, 9, 8192)  # 8192: a whole row saves 16x the work
    assert split_pays(1, 3, 2048)  # few runs: always


def test_whole_rows_in_many_runs_split_when_it_pays(ds, monkeypatch):
    """Where split_pays says so, whole rows in many runs go dense together and the rest varlen
    together, and the logits still equal each document alone."""
    from packer.train import hf

    monkeypatch.setattr(hf, "WHOLE_PER_RUN", 0)  # every mixed batch splits
    calls = _spy_varlen(monkeypatch, hf)
    dense = hf._dense_causal
    monkeypatch.setattr(hf, "_dense_causal", lambda q, k, v, rows, T, s: calls.append(("dense", rows)) or dense(q, k, v, rows, T, s))
    model, ids, T, got, ref = _alternating_runs(ds, hf)
    assert calls == [("dense", hf.MAX_RUNS), ("varlen", hf.MAX_RUNS * T)] * model.config.num_hidden_layers
    torch.testing.assert_close(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)


def test_whole_rows_first_leaves_the_loss_unchanged(ds):
    """The documented claim: reordering a batch's rows (one-document rows first) changes neither
    the loss nor the gradients under packer_attention."""
    from packer.train.batching import whole_rows_first

    model = tiny(ds, packer_attention())
    rows = many_docs(ds, 3)
    b = collate([ds[i] for i in rows] + [ds[rows[0]]])
    b["position_ids"][1] = torch.arange(b["position_ids"].shape[1])  # a one-document row, second
    r = whole_rows_first(b)
    assert not torch.equal(r["input_ids"], b["input_ids"])  # the order did change
    out = []
    for batch in (b, r):
        model.zero_grad()
        loss = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], labels=batch["labels"]).loss
        loss.backward()
        out.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(out[0][0], out[1][0], rtol=1e-5, atol=1e-6)
    for g0, g1 in zip(out[0][1], out[1][1]):
        torch.testing.assert_close(g0, g1, rtol=1e-4, atol=1e-6)
