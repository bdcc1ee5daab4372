"""manifest.json read in slices (packer/shards/manifest_stream.py): the head and entries json.loads
gives, at any block size and key order, and a damaged manifest refused as read_manifest refuses it."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from packer import shards as S
from packer.errors import ShardError
from packer.io import storage_for
from packer.shards import manifest_stream as ms


@pytest.mark.parametrize("block", [1, 7, 4096, 1 << 20])
def test_head_and_entries_are_json_loads_at_any_block_size(sample_build, monkeypatch, block):
    monkeypatch.setattr(ms, "BLOCK", block)
    m = json.load(open(os.path.join(sample_build, "manifest.json")))
    seen = []
    x = ms.ManifestStream(storage_for(sample_build), lambda i, e: seen.append((i, e)))
    assert x.head == {k: v for k, v in m.items() if k != "shards"} and x.n == len(m["shards"])
    assert seen == list(enumerate(m["shards"])) and list(x.entries()) == m["shards"]


def _rewrite(out: str, text: str) -> None:
    with open(os.path.join(out, "manifest.json"), "w") as f:
        f.write(text)


def test_keys_in_any_order_and_any_layout(sample_build, tmp_path, monkeypatch):
    monkeypatch.setattr(ms, "BLOCK", 5)
    out = str(tmp_path / "b")
    shutil.copytree(sample_build, out)
    m = json.load(open(os.path.join(out, "manifest.json")))
    moved = {"shards": m["shards"], **{k: v for k, v in m.items() if k != "shards"}}
    _rewrite(out, json.dumps(moved, separators=(",", ":")))  # shards first, no white space at all
    x = ms.ManifestStream(storage_for(out))
    assert x.head == {k: v for k, v in m.items() if k != "shards"} and list(x.entries()) == m["shards"]


@pytest.mark.parametrize("damage", ["cut", "trailing", "entry not an object", "shards not a list", "no shards",
                                    "not an object", "bad count"])
def test_a_damaged_manifest_is_refused_as_read_manifest_refuses_it(sample_build, tmp_path, damage):
    out = str(tmp_path / "b")
    shutil.copytree(sample_build, out)
    text = open(os.path.join(out, "manifest.json")).read()
    m = json.loads(text)
    if damage == "cut":
        text = text[:len(text) // 2]
    elif damage == "trailing":
        text += "{}"
    elif damage == "entry not an object":
        m["shards"][2] = 7
    elif damage == "shards not a list":
        m["shards"] = {"a": 1}
    elif damage == "no shards":
        del m["shards"]
    elif damage == "not an object":
        m = [m]
    else:
        m["shards"][1]["rows"] = -1
    _rewrite(out, text if damage in ("cut", "trailing") else json.dumps(m))
    with pytest.raises(ShardError) as want:
        S.read_manifest(out)
    with pytest.raises(ShardError) as got:
        ms.ManifestStream(storage_for(out))
    assert str(got.value) == str(want.value) and "\n" not in str(got.value)


def test_no_manifest_says_what_read_manifest_says(tmp_path):
    with pytest.raises(ShardError, match="not a packer build"):
        ms.ManifestStream(storage_for(str(tmp_path)))
