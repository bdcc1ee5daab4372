"""A build as an HF datasets.Dataset: the same rows as pyarrow reads, memory-mapped (no copy,
no cache files), and picklable as paths."""

from __future__ import annotations

import os
import pickle

import pyarrow as pa
import pytest

from packer.errors import PackerError, ShardError
from packer.shards import read_manifest
from packer.shards.hf_datasets import hf_dataset

datasets = pytest.importorskip("datasets")


def test_hf_dataset_is_the_build_memory_mapped(short_docs_build, tmp_path):
    m = read_manifest(short_docs_build)
    want = pa.concat_tables([pa.ipc.open_file(os.path.join(short_docs_build, s["path"])).read_all()
                             for s in m["shards"]])
    before = pa.total_allocated_bytes()
    ds = hf_dataset(short_docs_build)
    assert pa.total_allocated_bytes() - before < want.nbytes // 10  # mapped, not read into memory
    assert len(ds) == m["totals"]["rows"] == want.num_rows
    assert ds.column_names[:4] == ["input_ids", "doc_lens", "doc_index", "doc_offset"]
    for i in (0, len(ds) // 2, len(ds) - 1):
        assert ds[i]["input_ids"] == want.column("input_ids")[i].as_py()
        assert ds[i]["doc_lens"] == want.column("doc_lens")[i].as_py()
    assert ds.cache_files == [] or all(f["filename"].startswith(short_docs_build) for f in ds.cache_files)
    # pickled (map(num_proc), DataLoader workers): the paths travel, not the rows
    blob = pickle.dumps(ds)
    assert len(blob) < want.nbytes // 10
    back = pickle.loads(blob)
    assert back[5]["input_ids"] == ds[5]["input_ids"]
    sliced = pickle.loads(pickle.dumps(ds.data.slice(3, 4)))  # a reloaded slice reads the file format too
    assert sliced.num_rows == 4
    t = ds.with_format("torch")[0]["input_ids"]
    assert t.shape == (m["seq_len"],)


def test_datasets_own_from_file_cannot_read_a_shard(short_docs_build):
    """Why hf_dataset exists (docs/format.md says so): datasets reads the IPC stream format."""
    shard = os.path.join(short_docs_build, read_manifest(short_docs_build)["shards"][0]["path"])
    with pytest.raises(Exception):
        datasets.Dataset.from_file(shard)
    from packer import hf_dataset as top
    assert len(top(short_docs_build)) == len(hf_dataset(short_docs_build))


def test_hf_dataset_errors(short_docs_build, tmp_path):
    with pytest.raises(ShardError, match="not a packer build"):
        hf_dataset(str(tmp_path))
    with pytest.raises(PackerError, match="local builds"):
        hf_dataset("s3://bucket/out")
