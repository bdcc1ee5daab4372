"""--format nanogpt: train.bin / val.bin read with nanoGPT's own idiom (np.memmap uint16 and get_batch)."""

from __future__ import annotations

import os

import numpy as np

from packer.exports import export
from packer.exports.nanogpt import token_dtype
from tests._cli import cli, one_line

from .conftest import documents, flat


def get_batch(data_dir, split, block_size, batch_size, seed):
    """nanoGPT train.py's get_batch, on the CPU and seeded."""
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    ix = np.random.default_rng(seed).integers(len(data) - block_size, size=batch_size)
    x = np.stack([data[i:i + block_size].astype(np.int64) for i in ix])
    y = np.stack([data[i + 1:i + 1 + block_size].astype(np.int64) for i in ix])
    return ix, x, y


def test_train_and_val_hold_every_token_in_order(holdout_build, tmp_path):
    dest = str(tmp_path / "nano")
    export(holdout_build, dest, format="nanogpt")
    for split, build in (("train", holdout_build), ("val", holdout_build + "/holdout")):
        want = flat(documents(build))
        data = np.memmap(os.path.join(dest, f"{split}.bin"), dtype=np.uint16, mode="r")
        assert (data == want).all() and len(data) > 1000
        ix, x, y = get_batch(dest, split, 64, 8, seed=0)
        for i, xi, yi in zip(ix, x, y):
            assert (xi == want[i:i + 64]).all() and (yi == want[i + 1:i + 65]).all()
        assert (want == 256).sum() == len(documents(build))  # one EOS a document: what separates them


def test_without_a_holdout_no_val_bin_and_a_note(sample_build, tmp_path):
    r = export(sample_build, str(tmp_path / "nano"), format="nanogpt")
    assert sorted(os.listdir(tmp_path / "nano")) == ["packer-export.json", "train.bin"]
    assert any("no val.bin" in n for n in r.notes)


def test_a_chat_build_is_refused_in_one_line(chat_build, tmp_path):
    r = cli("export", chat_build[0], str(tmp_path / "nano"), "--format", "nanogpt")
    assert r.returncode == 2
    one_line(r, "chat build", "loss_mask")
    assert os.listdir(tmp_path) == []


def test_ids_over_uint16_are_written_as_uint32():
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32
