"""The shard schema is forward-compatible (docs/format.md): a reader ignores columns it does not
know, wherever they stand, and refuses a shard that lacks a required one."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest

from packer import shards as S
from packer.errors import ShardError
from packer.inspect.stats import check
from packer.io import write_json
from tests.conftest import invoke as run_cli
from tests.inspect.test_stats import manifest, problems, save_manifest, shard_path


def rewrite_shard(build: str, change) -> str:
    """Replace the first shard of ``build`` by ``change(table)``, with the manifest's size and checksum updated."""
    m = json.load(open(os.path.join(build, S.MANIFEST)))
    entry = m["shards"][0]
    path = os.path.join(build, entry["path"])
    table = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
    data = S.table_bytes(change(table))
    with open(path, "wb") as f:
        f.write(data)
    entry["bytes"], entry[S.CHECKSUM] = len(data), S.checksum(data)
    write_json(os.path.join(build, S.MANIFEST), m)
    return entry["path"]


def with_extra_column_first(table: pa.Table) -> pa.Table:
    extra = pa.array([f"note {i}" for i in range(table.num_rows)])
    return pa.Table.from_arrays([extra, *reversed(table.columns)], names=["future_column", *reversed(table.column_names)])


def test_schema_problems_name_what_is_missing_and_ignore_what_is_extra():
    want = S.schema(16, "uint16")
    assert S.schema_problems(want, 16, "uint16") == []
    extra = pa.schema([pa.field("loss_mask", pa.list_(pa.uint8(), 16)), *reversed(list(want))])
    assert S.schema_problems(extra, 16, "uint16") == []
    missing = pa.schema([f for f in want if f.name != "doc_offset"])
    assert S.schema_problems(missing, 16, "uint16") == ["column doc_offset is missing"]
    assert "input_ids is fixed_size_list" in S.schema_problems(want, 32, "uint16")[0]


def test_a_shard_with_an_unknown_column_reads_as_before(sample_build, copy_build):
    torch = pytest.importorskip("torch")
    from packer import PackedDataset

    before = PackedDataset(sample_build)
    build = copy_build(sample_build)
    rewrite_shard(build, with_extra_column_first)
    after = PackedDataset(build, verify=True)
    assert len(after) == len(before)
    for i in range(0, len(before), max(1, len(before) // 7)):
        for k, v in before[i].items():
            assert torch.equal(v, after[i][k]), (i, k)
    rep = check(build)
    assert rep.problems == [], [str(p) for p in rep.problems]


def test_a_shard_lacking_a_required_column_is_refused_by_every_reader(sample_build, copy_build):
    pytest.importorskip("torch")
    from packer import PackedDataset

    build = copy_build(sample_build)
    rel = rewrite_shard(build, lambda t: t.drop_columns(["doc_index"]))
    with pytest.raises(ShardError, match=r"column doc_index is missing"):
        PackedDataset(build, verify=True)
    with pytest.raises(ShardError, match=r"column doc_index is missing"):
        PackedDataset(build)[0]  # (without verify: at the shard's first use)
    kinds = {(p.path, p.kind) for p in check(build).problems}
    assert (rel, "schema") in kinds


# 5. One schema rule: stats and the dataset accept and refuse the same shards.
def _rewrite(out, transform, compression=None, prefix=b""):
    path = shard_path(out)
    t = pa.ipc.open_file(pa.memory_map(path)).read_all()
    t = transform(t)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(t, max_chunksize=1024)
    data = prefix + sink.getvalue().to_pybytes()
    open(path, "wb").write(data)
    m = manifest(out)
    m["shards"][0].update(bytes=len(data), **{S.CHECKSUM: S.checksum(data)})
    save_manifest(out, m)


@pytest.mark.parametrize("case", ["extra column", "reordered columns"])
def test_stats_and_dataset_both_accept_forward_compatible_shards(sample_build, copy_build, case):
    from packer import PackedDataset

    out = copy_build(sample_build)
    if case == "extra column":
        _rewrite(out, lambda t: t.append_column("score", pa.array(np.zeros(t.num_rows, np.float32))))
    else:
        _rewrite(out, lambda t: t.select(list(reversed(t.column_names))))
    res = run_cli("stats", out)
    assert res.exit_code == 0, res.stderr
    ds = PackedDataset(out, verify=True)
    ref = PackedDataset(sample_build)
    assert len(ds) == len(ref) and bool((ds[0]["input_ids"] == ref[0]["input_ids"]).all())


@pytest.mark.parametrize("case", ["zstd body", "lz4 body", "64 garbage bytes first"])
def test_stats_and_dataset_both_refuse_unmappable_shards(sample_build, copy_build, case):
    from packer import PackedDataset

    out = copy_build(sample_build)
    if case == "64 garbage bytes first":
        _rewrite(out, lambda t: t, prefix=os.urandom(64))
        word = "magic"
    else:
        _rewrite(out, lambda t: t, compression=case.split()[0])
        word = "compressed body"
    res = run_cli("stats", out)
    assert res.exit_code == 1 and any(word in ln for ln in problems(res)), res.stderr
    with pytest.raises(ShardError, match=word):
        PackedDataset(out)[0]  # checked at first use of the shard (opening reads no shard)
    assert run_cli("show", out, "0").exit_code == 1

