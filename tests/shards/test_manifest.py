"""packer/shards/manifest.py: a hostile manifest is one line naming manifest.json; a folder without one is
a user mistake (exit 2), not damage."""

from __future__ import annotations

import os

import pytest

from packer.errors import ShardError
from tests._cli import cli, one_line
from tests.conftest import invoke as run_cli
from tests.inspect.test_stats import manifest, save_manifest


@pytest.mark.parametrize("damage", ["seq_len a string", "shards a number", "a shard entry a list",
                                    "rows negative", "200k-deep nesting"])
def test_hostile_manifest_is_one_line(sample_build, copy_build, damage):
    from packer import PackedDataset

    out = copy_build(sample_build)
    path = os.path.join(out, "manifest.json")
    m = manifest(out)
    if damage == "seq_len a string":
        m["seq_len"] = "256"
    elif damage == "shards a number":
        m["shards"] = 5
    elif damage == "a shard entry a list":
        m["shards"][0] = [1, 2]
    elif damage == "rows negative":
        m["shards"][0]["rows"] = -1
    if damage == "200k-deep nesting":
        open(path, "w").write('{"format": "packer", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    else:
        save_manifest(out, m)
    for cmd in (["stats", out], ["show", out, "0"]):
        res = run_cli(*cmd)
        assert res.exit_code == 1, res.output
        assert len(res.stderr.strip().splitlines()) == 1 and "manifest.json" in res.stderr
    with pytest.raises(ShardError, match="manifest"):
        PackedDataset(out)


def test_not_a_build_is_a_user_mistake(tmp_path):
    (tmp_path / "x").mkdir()
    for cmd in (["stats", str(tmp_path / "x")], ["show", str(tmp_path / "x"), "0"]):
        r = cli(*cmd, timeout=60)
        assert r.returncode == 2
        one_line(r, "not a packer build")

