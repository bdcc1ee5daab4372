"""Rows read by index.arrow's row layout (packer/shards/shard_file.py): exactly the rows of the mapped
path, for every row of a build (the last, partial record batch included) and of a chat build (loss
masks), and a shard that no longer matches its index refused in one line."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from packer import PackedDataset
from packer import shards as S
from packer.errors import ShardError
from packer.io import storage_for
from packer.shards.shard_file import ShardFile
from packer.shards.mapped import Mapped

from tests.train.test_dataset import _first_row, _shard, _without_layout


def _pair(out: str, tmp_path) -> tuple[PackedDataset, PackedDataset]:
    """The build read by its layout, and a copy of it whose index predates the layout (mapped, Arrow parsed)."""
    old = str(tmp_path / "old")
    shutil.copytree(out, old)
    return PackedDataset(out), PackedDataset(_without_layout(old))


def _same_rows(fast: PackedDataset, slow: PackedDataset, idx) -> None:
    for i in idx:
        a, b = fast[i], slow[i]
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), (i, k)
    a, b = fast.batch(idx), slow.batch(idx)
    for k in a:
        if k == "_piece_at":
            np.testing.assert_array_equal(a[k], b[k])
        elif k == "max_seqlen":
            assert a[k] == b[k]
        else:
            assert torch.equal(a[k], b[k]), k


def test_every_row_is_the_mapped_paths_row(sample_build, tmp_path):
    fast, slow = _pair(sample_build, tmp_path)
    n = len(fast)
    m = S.read_manifest(sample_build)
    assert len(m["shards"]) > 1 and any(e["rows"] % 1024 for e in m["shards"])  # partial last batches
    order = np.random.default_rng(0).permutation(n).tolist()  # each shard's first use is a random row
    _same_rows(fast, slow, order)
    assert {type(x) for x in fast._maps.values()} == {ShardFile}
    assert {type(x) for x in slow._maps.values()} == {Mapped}
    for k in range(fast.num_shards):  # the last row of every shard: the end of its partial batch
        last = _first_row(sample_build, k + 1) - 1
        _same_rows(PackedDataset(sample_build), slow, [last, _first_row(sample_build, k)])


def test_chat_rows_and_loss_masks_are_the_mapped_paths(chat_build, tmp_path):
    out, _ = chat_build
    fast, slow = _pair(out, tmp_path)
    assert fast._shards.layout(0)[6] is not None  # the loss_mask offsets are recorded
    idx = np.random.default_rng(1).permutation(len(fast)).tolist()
    _same_rows(fast, slow, idx)
    assert any((r["labels"] == -100).sum() > 1 for r in (fast[i] for i in idx[:20]))


def test_a_shard_truncated_after_its_first_use_fails_in_one_line(sample_build, copy_build):
    out = copy_build(sample_build)
    ds = PackedDataset(out)
    row = _first_row(out, 2)
    ds[row]
    ds.wait_for_checks()  # its background hash passed on the whole file (else it may read the cut one: "corrupt")
    os.truncate(_shard(out, 2), 4096)
    with pytest.raises(ShardError, match=r"000002\.arrow: shard is truncated \(4096 bytes"):
        ds[row + 1]  # the second use maps it: checked first


def test_a_replaced_shard_of_the_same_size_fails_in_one_line(sample_build, copy_build):
    """Another shard's bytes cut to this one's size: the footer (and so the stamp) differs."""
    out = copy_build(sample_build)
    p, q = _shard(out, 0), _shard(out, 2)
    size = os.path.getsize(p)
    data = open(q, "rb").read()
    assert len(data) >= size
    with open(p, "wb") as f:
        f.write(data[:size - 200] + data[-200:])  # a valid-looking tail, of the other shard
    with pytest.raises(ShardError, match=r"000000\.arrow: shard differs from the one its build indexed .*: shard is corrupt$"):
        PackedDataset(out)[0]
    with pytest.raises(ShardError, match=r"000000\.arrow: checksum mismatch"):
        PackedDataset(out, verify=True)


def test_a_damaged_layout_in_the_index_fails_and_verify_names_it(sample_build, copy_build):
    """index.arrow's layout is covered by the stamp: a wrong offset is refused at first use, not read."""
    out = copy_build(sample_build)
    m = S.read_manifest(out)
    lays = S.index.shard_layouts(storage_for(out), m)
    bad = list(lays[1])
    bad[3] = bad[3] + 8  # input_ids of every batch 8 bytes on: garbage tokens, were it read
    lays[1] = tuple(bad)
    S.write_manifest(storage_for(out), m, layouts=lays)
    ds = PackedDataset(out)
    assert torch.equal(ds[0]["input_ids"], PackedDataset(sample_build)[0]["input_ids"])
    with pytest.raises(ShardError, match=r"000001\.arrow: shard differs from the one its build indexed"):
        ds[_first_row(out, 1)]
    with pytest.raises(ShardError, match=r"000001\.arrow: index\.arrow's row layout differs from the shard's"):
        PackedDataset(out, verify=True)
