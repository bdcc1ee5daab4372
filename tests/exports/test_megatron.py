"""--format megatron: PREFIX.bin/.idx read back by a NumPy reader of megatron-core's documented layout, and by
megatron-core's own IndexedDataset where it is installed; one sequence per document, in order."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from packer.exports import export
from packer.exports.megatron import token_dtype
from tests._cli import cli, one_line

from .conftest import documents


def read_idx(path: str) -> dict:
    """megatron-core's .idx (indexed_dataset.py, _IndexWriter), read with NumPy alone."""
    data = open(path, "rb").read()
    assert data[:9] == b"MMIDIDX\x00\x00"
    version, code, n, docs = struct.unpack("<QBQQ", data[9:34])
    assert (version, docs) == (1, n + 1)
    lengths = np.frombuffer(data, np.int32, n, 34)
    pointers = np.frombuffer(data, np.int64, n, 34 + 4 * n)
    doc_idx = np.frombuffer(data, np.int64, docs, 34 + 12 * n)
    assert len(data) == 34 + 12 * n + 8 * docs
    return {"dtype": {8: np.uint16, 4: np.int32}[code], "lengths": lengths, "pointers": pointers, "doc_idx": doc_idx}


def read_prefix(prefix: str) -> list[np.ndarray]:
    idx = read_idx(prefix + ".idx")
    data = np.fromfile(prefix + ".bin", dtype=idx["dtype"])
    size = np.dtype(idx["dtype"]).itemsize
    assert (idx["doc_idx"] == np.arange(len(idx["lengths"]) + 1)).all()
    assert (idx["pointers"] == (np.cumsum(idx["lengths"]) - idx["lengths"]) * size).all()
    assert int(idx["lengths"].sum()) == len(data)
    return [data[p // size:p // size + n] for p, n in zip(idx["pointers"], idx["lengths"])]


def test_each_document_is_one_sequence_in_order_and_the_holdout_is_prefix_val(holdout_build, tmp_path):
    prefix = str(tmp_path / "data")
    r = export(holdout_build, prefix, format="megatron")
    assert r.files == ["data.bin", "data_val.bin", "data_val.idx", "data.packer.json", "data.idx"]
    assert sorted(os.listdir(tmp_path)) == sorted(r.files)  # no temp folder left
    for got, build in ((read_prefix(prefix), holdout_build), (read_prefix(prefix + "_val"), holdout_build + "/holdout")):
        want = documents(build)
        assert len(got) == len(want) > 10
        assert all((g == w).all() for g, w in zip(got, want))
        assert all(g[-1] == 256 for g in got)  # the byte tokenizer's EOS, as the build stored it
    assert read_idx(prefix + ".idx")["dtype"] == np.uint16


def test_megatron_cores_own_reader_reads_it(holdout_build, tmp_path):
    pytest.importorskip("megatron.core.datasets.indexed_dataset")
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    prefix = str(tmp_path / "data")
    export(holdout_build, prefix, format="megatron")
    ds = IndexedDataset(prefix)
    want = documents(holdout_build)
    assert len(ds) == len(want)
    assert all((np.asarray(ds[i]) == w).all() for i, w in enumerate(want))
    assert list(ds.document_indices) == list(range(len(want) + 1))


def test_the_token_dtype_is_megatrons_choice():
    assert token_dtype(257) == np.uint16 and token_dtype(65499) == np.uint16
    assert token_dtype(65500) == np.int32 and token_dtype(151_936) == np.int32


def test_a_chat_build_is_refused_in_one_line(chat_build, tmp_path):
    r = cli("export", chat_build[0], str(tmp_path / "data"), "--format", "megatron")
    assert r.returncode == 2
    one_line(r, "chat build", "loss_mask")
    assert os.listdir(tmp_path) == []
