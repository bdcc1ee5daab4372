"""--format olmo: raw 1-D token arrays (and bool label masks for chat) as OLMo-core's NumpyFSLDataset reads them."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

from packer.exports import export, olmo
from packer.repacking import open_source, shard_documents
from tests._cli import cli, one_line

from .conftest import documents, flat


def test_the_parts_hold_every_document_in_order_and_the_holdout_is_val(holdout_build, tmp_path, monkeypatch):
    monkeypatch.setattr(olmo, "PART_BYTES", 1 << 20)  # several parts, each ending at a document's end
    dest = str(tmp_path / "olmo")
    r = export(holdout_build, dest, format="olmo")
    parts = sorted(glob.glob(dest + "/part-*.npy"))
    assert len(parts) > 1 and r.parts["train"]["paths"] == [os.path.basename(p) for p in parts]
    arrays = [np.fromfile(p, dtype=np.uint16) for p in parts]  # raw, no .npy header
    assert all(a[-1] == 256 for a in arrays)
    assert (np.concatenate(arrays) == flat(documents(holdout_build))).all()
    val = np.concatenate([np.fromfile(p, dtype=np.uint16) for p in sorted(glob.glob(dest + "/val/part-*.npy"))])
    assert (val == flat(documents(holdout_build + "/holdout"))).all()
    assert json.load(open(dest + "/packer-export.json"))["format"] == "olmo"


def test_olmo_cores_dataset_reads_the_windows(holdout_build, tmp_path):
    pytest.importorskip("olmo_core.data.numpy_dataset")
    from olmo_core.data.numpy_dataset import NumpyFSLDataset

    dest = str(tmp_path / "olmo")
    export(holdout_build, dest, format="olmo")
    ds = NumpyFSLDataset(dest + "/part-00000.npy", sequence_length=128, pad_token_id=0, eos_token_id=256,
                         vocab_size=257, dtype=np.uint16, generate_doc_lengths=True)
    tokens = flat(documents(holdout_build))
    assert len(ds) == len(tokens) // 128
    for i in (0, 1, len(ds) - 1):
        item = ds[i]
        assert (item["input_ids"].numpy() == tokens[i * 128:(i + 1) * 128]).all()


def test_a_chat_build_writes_its_label_mask_and_every_conversation_ends_with_eos(chat_build, tmp_path):
    from tokenizers import Tokenizer

    out, tok = chat_build
    dest = str(tmp_path / "olmo")
    r = cli("export", out, dest, "--format", "olmo")  # a chat build records no EOS id: named, or refused
    assert r.returncode == 2 and "--eos-id" in one_line(r, "chat build")
    eos = Tokenizer.from_file(tok).token_to_id("<|im_end|>")
    r = export(out, dest, format="olmo", eos_id=eos)
    src = open_source(out)
    dtype = olmo.token_dtype(src.manifest["vocab_size"])
    tokens = np.fromfile(dest + "/part-00000.npy", dtype=dtype)
    mask = np.fromfile(dest + "/label_mask/part-00000.npy", dtype=np.bool_)
    assert len(tokens) == len(mask) == r.parts["train"]["tokens"]
    want = [shard_documents(src.store, e, src.seq_len, src.manifest["dtype"], True) for e in src.manifest["shards"]]
    want_mask = np.concatenate([d.mask for d in want]).astype(bool)
    assert int(mask.sum()) == int(want_mask.sum()) == src.manifest["totals"]["trained_tokens"]
    assert r.parts["train"]["documents"] == src.manifest["totals"]["documents"]
    assert tokens[-1] == eos and (tokens == eos).sum() >= r.parts["train"]["documents"]
    if r.parts["train"]["eos_added"] == 0:
        assert (tokens == np.concatenate([d.tokens for d in want])).all() and (mask == want_mask).all()
    pytest.importorskip("olmo_core.data.numpy_dataset")
    from olmo_core.data.numpy_dataset import NumpyFSLDataset

    ds = NumpyFSLDataset(dest + "/part-00000.npy", sequence_length=64, pad_token_id=eos, eos_token_id=eos,
                         vocab_size=src.manifest["vocab_size"], dtype=dtype.type,
                         label_mask_paths=[dest + "/label_mask/part-00000.npy"])
    item = ds[1]
    assert (item["label_mask"].numpy() == mask[64:128]).all()


def test_a_build_without_eos_is_refused_in_one_line_or_given_the_eos_id(no_eos_build, tmp_path):
    r = cli("export", no_eos_build, str(tmp_path / "olmo"), "--format", "olmo")
    assert r.returncode == 2
    one_line(r, "--no-eos", "OLMo-core", "--eos-id")
    assert os.listdir(tmp_path) == []
    r = export(no_eos_build, str(tmp_path / "olmo"), format="olmo", eos_id=256)
    docs = documents(no_eos_build)
    assert r.parts["train"]["eos_added"] == len(docs) and any("did not end with EOS" in n for n in r.notes)
    got = np.fromfile(tmp_path / "olmo" / "part-00000.npy", dtype=np.uint16)
    assert (got == flat([np.append(d, 256) for d in docs])).all()


def test_the_dtype_is_olmo_cores_choice():
    assert olmo.token_dtype(256) == np.uint8 and olmo.token_dtype(257) == np.uint16
    assert olmo.token_dtype(65536) == np.uint16 and olmo.token_dtype(65537) == np.uint32
