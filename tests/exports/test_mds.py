"""--format mds: MDS shards parsed by a reader of the documented layout (mosaicml-streaming's own reader runs in
bench/mds_check.py, in a venv of its own: it pins numpy < 2.2); one sample per packed row, as stored."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa

from packer.exports import export, mds


def read_mds(folder: str) -> list[dict]:
    """Every sample of an MDS folder: index.json, then each shard's header, offsets and columns."""
    index = json.load(open(os.path.join(folder, "index.json")))
    assert index["version"] == 2
    samples = []
    for sh in index["shards"]:
        data = open(os.path.join(folder, sh["raw_data"]["basename"]), "rb").read()
        assert len(data) == sh["raw_data"]["bytes"] and sh["format"] == "mds" and sh["zip_data"] is None
        n = int(np.frombuffer(data, np.uint32, 1)[0])
        assert n == sh["samples"]
        offsets = np.frombuffer(data, np.uint32, n + 1, 4)
        cfg = json.loads(data[4 + 4 * (n + 1):offsets[0]])
        assert cfg["column_names"] == sh["column_names"] == sorted(cfg["column_names"])
        for a, b in zip(offsets[:-1], offsets[1:]):
            s = data[a:b]
            dyn = [c for c, size in zip(cfg["column_names"], cfg["column_sizes"]) if size is None]
            sizes = dict(zip(dyn, np.frombuffer(s, np.uint32, len(dyn))))
            at, row = 4 * len(dyn), {}
            for name, enc, size in zip(cfg["column_names"], cfg["column_encodings"], cfg["column_sizes"]):
                size = int(sizes[name] if size is None else size)
                row[name] = _decode(enc, s[at:at + size])
                at += size
            samples.append(row)
    return samples


def _decode(enc: str, b: bytes) -> np.ndarray:
    _, dtype, *shape = enc.split(":")
    if shape:
        return np.frombuffer(b, dtype)
    ndim, code = b[0] >> 2, b[0] & 3
    shape_dtype = [np.uint8, np.uint16, np.uint32, np.uint64][code]
    dims = np.frombuffer(b, shape_dtype, ndim, 1)
    return np.frombuffer(b, dtype, offset=1 + ndim * np.dtype(shape_dtype).itemsize).reshape(dims)


def rows(build: str) -> list[dict]:
    m = json.load(open(os.path.join(build, "manifest.json")))
    out = []
    for sh in m["shards"]:
        t = pa.ipc.open_file(pa.memory_map(os.path.join(build, sh["path"]))).read_all()
        for r in t.to_pylist():
            out.append(r)
    return out


def test_each_packed_row_is_one_sample_and_the_holdout_is_val(holdout_build, tmp_path, monkeypatch):
    monkeypatch.setattr(mds, "SIZE_LIMIT", 1 << 20)  # several MDS shards
    dest = str(tmp_path / "mds")
    export(holdout_build, dest, format="mds")
    assert len(json.load(open(dest + "/index.json"))["shards"]) > 3
    for folder, build in ((dest, holdout_build), (dest + "/val", holdout_build + "/holdout")):
        got, want = read_mds(folder), rows(build)
        assert len(got) == len(want) > 10
        for g, w in zip(got, want):
            assert sorted(g) == ["doc_lens", "input_ids"]
            assert g["input_ids"].dtype == np.uint16 and list(g["input_ids"]) == w["input_ids"]
            assert list(g["doc_lens"]) == w["doc_lens"]


def test_a_chat_build_carries_its_loss_mask(chat_build, tmp_path):
    dest = str(tmp_path / "mds")
    export(chat_build[0], dest, format="mds")
    got, want = read_mds(dest), rows(chat_build[0])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g["loss_mask"]) == w["loss_mask"] and list(g["input_ids"]) == w["input_ids"]
        assert list(g["doc_lens"]) == w["doc_lens"]
