"""HF Trainer on a PackedDataset with Trainer's defaults, and with packer's sampler:
documents masked, deterministic order, exact resume from Trainer's checkpoints. CPU, tiny Llama."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch

from packer import PackedDataset, PackedSampler
from packer.train.hf import packer_attention, use_packed_sampler

pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")
from transformers import Trainer, TrainingArguments  # noqa: E402

from .test_hf import alone, tiny  # noqa: E402


@pytest.fixture(scope="module")
def ds(short_docs_build):
    return PackedDataset(short_docs_build)


def args(out, **kw):
    base = dict(output_dir=str(out), per_device_train_batch_size=2, report_to=[], use_cpu=True, save_strategy="no",
                logging_strategy="no", dataloader_num_workers=0, seed=0, learning_rate=1e-3, disable_tqdm=True)
    base.update(kw)
    return TrainingArguments(**base)


def record(model):
    """Capture every training forward's inputs (and the first one's logits)."""
    seen = []

    def hook(module, a, kw, out):
        if module.training:
            seen.append({"kw": {k: v.detach().clone() for k, v in kw.items() if isinstance(v, torch.Tensor)},
                         "logits": out.logits.detach().clone() if not seen else None})

    model.register_forward_hook(hook, with_kwargs=True)
    return seen


@pytest.mark.parametrize("attn", ["sdpa", "packer"])
def test_trainer_defaults_train_and_mask_documents(ds, tmp_path, attn):
    """Trainer(model, args, train_dataset=PackedDataset(out)): no collator, no sampler given.
    The first step's logits equal each document of its rows run alone."""
    model = tiny(ds, packer_attention() if attn == "packer" else "sdpa")
    start = copy.deepcopy(model)
    seen = record(model)
    Trainer(model=model, args=args(tmp_path, max_steps=2), train_dataset=ds).train()
    assert len(seen) == 2
    first = seen[0]["kw"]
    assert set(first) - {"num_items_in_batch"} == {"input_ids", "labels", "position_ids"}  # doc_lens dropped
    assert first["input_ids"].shape == (2, ds.seq_len)
    assert int((first["position_ids"] == 0).sum()) > 2  # rows with several documents: mixing was possible
    with torch.no_grad():
        ref = alone(start.eval(), first["input_ids"], first["position_ids"])
    torch.testing.assert_close(seen[0]["logits"].reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)


def test_trainer_keeping_every_column(ds, tmp_path):
    """issue 30.3: remove_unused_columns=False (common with TRL and custom datasets) stacks every column,
    and doc_lens is ragged: one PackerError saying what to do, not torch's "stack expects each tensor to be
    equal size"; with that advice (data_collator=packer.collate) it trains, documents apart."""
    from packer import PackerError, collate

    keep = args(tmp_path, max_steps=2, remove_unused_columns=False)
    with pytest.raises(PackerError, match="data_collator=packer.collate"):
        Trainer(model=tiny(ds), args=keep, train_dataset=ds).train()
    model = tiny(ds)
    start = copy.deepcopy(model)
    seen = record(model)
    Trainer(model=model, args=keep, train_dataset=ds, data_collator=collate).train()
    first = seen[0]["kw"]
    assert {"input_ids", "labels", "position_ids", "cu_seqlens"} <= set(first)
    with torch.no_grad():
        ref = alone(start.eval(), first["input_ids"], first["position_ids"])
    torch.testing.assert_close(seen[0]["logits"].reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)


def _run(ds, out, steps, resume=None):
    model = tiny(ds, packer_attention())
    seen = record(model)
    t = use_packed_sampler(Trainer(model=model, args=args(out, max_steps=steps, save_strategy="steps", save_steps=2),
                                   train_dataset=ds))
    t.train(resume_from_checkpoint=resume)
    return [s["kw"]["input_ids"] for s in seen], model


def test_trainer_packed_sampler_order_and_exact_resume(ds, tmp_path):
    """use_packed_sampler(trainer): rows in PackedSampler(seed=args.seed) order; a run resumed
    from checkpoint-2 trains on exactly the rows, and ends at exactly the weights, of the full run."""
    full, m_full = _run(ds, tmp_path / "a", 4)
    order = PackedSampler(ds, seed=0).epoch_order()
    want = [ds.batch(order[2 * j:2 * j + 2])["input_ids"] for j in range(4)]
    for got, w in zip(full, want):
        assert torch.equal(got, w)
    ckpt = os.path.join(tmp_path / "a", "checkpoint-2")
    assert os.path.isdir(ckpt)
    resumed, m_res = _run(ds, tmp_path / "a", 4, resume=ckpt)
    assert len(resumed) == 2
    for got, w in zip(resumed, full[2:]):
        assert torch.equal(got, w)
    for (n, a), b in zip(m_full.named_parameters(), m_res.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=n)
    assert not np.array_equal(order[:8], np.arange(8))  # the order is shuffled: the check can fail


@pytest.mark.parametrize("sampling", ["random", "group_by_length"])
def test_trainer_defaults_on_hf_dataset_keep_documents_apart(short_docs_build, ds, tmp_path, sampling):
    """issue 42.3: ``Trainer(model, args, train_dataset=packer.hf_dataset(out))`` with defaults (and with
    train_sampling_strategy="group_by_length") sent no position_ids, so each row ran as one sequence (hidden states off by 4.06):
    the dataset carries them, default_data_collator passes them on, and the first step's logits equal
    each document of its rows run alone (sdpa, the model's default cache)."""
    from packer import hf_dataset

    model = tiny(ds, "sdpa")
    assert model.config.use_cache  # Trainer turns it off; the rows must not depend on more
    start = copy.deepcopy(model)
    seen = record(model)
    Trainer(model=model, args=args(tmp_path, max_steps=1, train_sampling_strategy=sampling),
            train_dataset=hf_dataset(short_docs_build)).train()
    first = seen[0]["kw"]
    assert "position_ids" in first and "attention_mask" not in first
    assert int((first["position_ids"] == 0).sum()) > 2  # rows with several documents: mixing was possible
    with torch.no_grad():
        ref = alone(start.eval(), first["input_ids"], first["position_ids"])
        mixed = start(input_ids=first["input_ids"], use_cache=False).logits  # the old batch: no position_ids
    torch.testing.assert_close(seen[0]["logits"].reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)
    assert (mixed.reshape(ref.shape) - ref).abs().max() > 1e-2  # the check can fail
