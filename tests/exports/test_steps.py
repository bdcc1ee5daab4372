"""export() top to bottom: the options, DEST refused or replaced, a damaged build, the API and the CLI agree."""

from __future__ import annotations

import json
import os

import pytest

import packer
from packer.errors import PackerError
from tests._cli import cli, one_line


def test_packer_export_is_the_api_and_an_unknown_format_is_one_line(sample_build, tmp_path):
    assert packer.export is packer.exports.export
    with pytest.raises(PackerError, match="--format must be one of megatron, olmo, nanogpt, mds"):
        packer.export(sample_build, str(tmp_path / "x"), format="gguf")
    with pytest.raises(PackerError, match="--eos-id .* --format olmo only"):
        packer.export(sample_build, str(tmp_path / "x"), format="megatron", eos_id=3)
    with pytest.raises(PackerError, match="is the build itself"):
        packer.export(sample_build, sample_build, format="olmo", overwrite=True)
    r = cli("export", str(tmp_path / "nothing"), str(tmp_path / "x"), "--format", "olmo")
    assert r.returncode == 2 and not os.path.exists(tmp_path / "x")


@pytest.mark.parametrize("fmt", ["megatron", "olmo", "nanogpt", "mds"])
def test_dest_that_exists_is_refused_without_overwrite_and_replaced_with_it(sample_build, tmp_path, fmt):
    dest = str(tmp_path / "d")
    r = cli("export", sample_build, dest, "--format", fmt, "-q")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    before = sorted(os.listdir(tmp_path))
    r = cli("export", sample_build, dest, "--format", fmt)
    assert r.returncode == 2
    one_line(r, "exists", "--overwrite")
    r = cli("export", sample_build, dest, "--format", fmt, "--overwrite")
    assert r.returncode == 0, r.stderr
    assert "exported" in r.stderr and sorted(os.listdir(tmp_path)) == before  # no temp folder, nothing else


def test_overwrite_never_replaces_a_folder_no_export_wrote(sample_build, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    r = cli("export", sample_build, str(tmp_path / "mine"), "--format", "olmo", "--overwrite")
    assert r.returncode == 2
    one_line(r, "no packer export wrote")
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


@pytest.mark.parametrize("fmt", ["megatron", "mds"])
def test_a_damaged_shard_is_one_line_and_leaves_no_export(sample_build, copy_build, tmp_path, fmt):
    out = copy_build(sample_build)
    m = json.load(open(os.path.join(out, "manifest.json")))
    path = os.path.join(out, m["shards"][-1]["path"])  # the last: the others are written first
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    dest = tmp_path / "exp"
    dest.mkdir()
    r = cli("export", out, str(dest / "d"), "--format", fmt)
    assert r.returncode == 1
    one_line(r, m["shards"][-1]["path"], "corrupt")
    assert os.listdir(dest) == []


def test_a_killed_export_leaves_only_a_temp_folder(sample_build, tmp_path):
    r = cli("export", sample_build, str(tmp_path / "d"), "--format", "megatron", env={"PACKER_FAULT": "export_shard"})
    assert r.returncode < 0 or r.returncode == 137
    left = os.listdir(tmp_path)
    assert len(left) == 1 and left[0].startswith(".tmp-export-"), left
