"""TRL's SFTTrainer on a packer build with no glue (docs/training.md):
``SFTTrainer(model, args=SFTConfig(padding_free=True, max_length=None, dataset_kwargs={"skip_prepare_dataset": True}),
train_dataset=packer.hf_dataset(out))``.

Every segment TRL's collator forms is one document piece or a row's padding tail, its labels fall
exactly on the build's loss_mask (chat) or on every document token but each piece's first (text),
never on padding, and the model's loss on TRL's batch equals the loss of each document run alone.
The expectations are read from the shards with pyarrow, not through packer's readers."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
import torch

from packer.shards import read_manifest
from packer.shards.hf_datasets import hf_dataset

trl = pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")


def _hf_tokenizer(tokenizer_json: str | None, vocab_size: int):
    """A transformers tokenizer object, made here (no download): TRL needs one for its pad id."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    if tokenizer_json is None:  # packer's byte tokenizer: any vocabulary of the right size will do
        tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
        return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1")
    return PreTrainedTokenizerFast(tokenizer_file=tokenizer_json, pad_token="<|im_end|>", eos_token="<|im_end|>")


def expected_rows(out):
    """Per row of the build, from the shards: (input_ids, segment lengths, labels) as TRL must train them."""
    m = read_manifest(out)
    L = int(m["seq_len"])
    rows = []
    for sh in m["shards"]:
        t = pa.ipc.open_file(os.path.join(out, sh["path"])).read_all()
        masks = t.column("loss_mask").to_pylist() if "loss_mask" in t.column_names else [None] * t.num_rows
        for ids, lens, mask in zip(t.column("input_ids").to_pylist(), t.column("doc_lens").to_pylist(), masks):
            used = sum(lens)
            segs = lens + ([L - used] if used < L else [])
            lab = np.full(L, -100, dtype=np.int64)
            s = 0
            for n in lens:
                for i in range(s + 1, s + n):  # a piece's first token is predicted from nothing in its piece
                    if mask is None or mask[i]:
                        lab[i] = ids[i]
                s += n
            rows.append((np.array(ids), segs, lab))
    return L, rows


def _trainer(out, tokenizer_json, tmp_path, **args):
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    m = read_manifest(out)
    vocab = int(m.get("vocab_size") or m["tokenizer"]["vocab_size"])
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    config = SFTConfig(output_dir=str(tmp_path / "run"), padding_free=True, max_length=None, report_to=[],
                       dataset_kwargs={"skip_prepare_dataset": True},  # the rows are ready; TRL refuses a transform
                       use_cpu=True, save_strategy="no", per_device_train_batch_size=3, max_steps=2,
                       learning_rate=1e-3, **args)
    return SFTTrainer(LlamaForCausalLM(cfg), args=config, train_dataset=hf_dataset(out),
                      processing_class=_hf_tokenizer(tokenizer_json, vocab))


def check_trl(out, tokenizer_json, tmp_path):
    L, rows = expected_rows(out)
    by_ids = {r[0].tobytes(): r for r in rows}
    trainer = _trainer(out, tokenizer_json, tmp_path)
    model = trainer.model
    seen = 0
    for batch in trainer.get_train_dataloader():
        ids = batch["input_ids"].reshape(-1, L).numpy()
        want = [by_ids[r.tobytes()] for r in ids]  # each of TRL's rows is a row of the build
        segs = [n for w in want for n in w[1]]
        cu = np.concatenate([[0], np.cumsum(segs)])
        assert batch["cu_seq_lens_q"].tolist() == cu.tolist()  # segments: the pieces and the padding tails
        pos = np.concatenate([np.arange(n) for n in segs])
        assert batch["position_ids"].reshape(-1).tolist() == pos.tolist()
        np.testing.assert_array_equal(batch["labels"].reshape(-1).numpy(), np.concatenate([w[2] for w in want]))
        seen += len(want)
        if seen == len(want):  # the first batch: the model's loss equals that of each segment alone
            inputs = {k: v for k, v in batch.items() if k in ("input_ids", "labels", "position_ids",
                                                                 "cu_seq_lens_q", "cu_seq_lens_k",
                                                                 "max_length_q", "max_length_k")}
            with torch.no_grad():
                got = model(**inputs, use_cache=False).loss
                flat_ids, flat_lab = batch["input_ids"][0], batch["labels"][0]
                total, count = 0.0, 0
                for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
                    lab = flat_lab[a + 1:b]
                    if (lab != -100).any():
                        lg = model(input_ids=flat_ids[a:b][None], use_cache=False).logits[0, :-1]
                        total += float(torch.nn.functional.cross_entropy(lg, lab, reduction="sum", ignore_index=-100))
                        count += int((lab != -100).sum())
            torch.testing.assert_close(float(got), total / count, rtol=1e-4, atol=1e-5)
    assert seen == len(rows)
    result = trainer.train()
    assert np.isfinite(result.training_loss)
    return rows


def test_sfttrainer_on_a_text_build(short_docs_build, tmp_path):
    rows = check_trl(short_docs_build, None, tmp_path)
    assert sum(len(r[1]) >= 3 for r in rows) > len(rows) // 4  # rows of several documents: mixing was possible


def test_sfttrainer_on_a_chat_build(chat_build, tmp_path):
    out, tokenizer_json = chat_build
    rows = check_trl(out, tokenizer_json, tmp_path)
    m = read_manifest(out)
    trained = sum(int((r[2] != -100).sum()) for r in rows)
    assert 0 < trained == m["totals"]["trained_tokens"]  # the loss mask, exactly (no mask bit at a piece start)
    assert sum(len(r[1]) > 2 for r in rows) >= 2  # rows holding several conversations
