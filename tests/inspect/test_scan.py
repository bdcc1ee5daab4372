"""packer/inspect/scan.py: a shard's piece columns are checked without trusting their values."""

from __future__ import annotations

from tests.conftest import invoke as run_cli
from tests.inspect.test_stats import manifest, problems, read_columns, shard_path, write_shard


def test_doc_index_past_the_pieces_is_damage_not_a_32_gib_count(sample_build, copy_build):
    out = copy_build(sample_build)
    seq_len = manifest(out)["seq_len"]
    ids, lists = read_columns(shard_path(out), seq_len)
    lists["doc_index"][1][0] = 0xFFFFFFFF
    write_shard(out, 0, ids, lists, seq_len)
    res = run_cli("stats", out)
    assert res.exit_code == 1
    assert any("doc_index 4294967295" in ln for ln in problems(res)), res.stderr

