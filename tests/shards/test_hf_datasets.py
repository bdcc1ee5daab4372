"""A build as an HF datasets.Dataset: the same rows as pyarrow reads, memory-mapped (no copy),
picklable as paths; packer's labels/seq_lengths beside them; nothing done through the dataset
writes into the build folder; verify=True catches damaged bytes, and a chat shard without its
loss_mask is refused."""

from __future__ import annotations

import hashlib
import json
import os
import pickle

import numpy as np

import pyarrow as pa
import pytest

from packer.errors import PackerError, ShardError
from packer.shards import read_manifest
from packer.shards.hf_datasets import hf_dataset

datasets = pytest.importorskip("datasets")


def test_hf_dataset_is_the_build_memory_mapped(short_docs_build, datasets_cache):
    m = read_manifest(short_docs_build)
    want = pa.concat_tables([pa.ipc.open_file(os.path.join(short_docs_build, s["path"])).read_all()
                             for s in m["shards"]])
    before = pa.total_allocated_bytes()
    ds = hf_dataset(short_docs_build)
    assert pa.total_allocated_bytes() - before < want.nbytes // 10  # mapped, not read into memory
    assert len(ds) == m["totals"]["rows"] == want.num_rows
    # stored: the shards' columns and seq_lengths; labels and position_ids are made as rows are read
    assert set(ds.column_names) == {"input_ids", "doc_lens", "doc_index", "doc_offset", "seq_lengths"}
    assert set(ds[0]) == set(ds.column_names) | {"labels", "position_ids"}
    for i in (0, len(ds) // 2, len(ds) - 1):
        assert ds[i]["input_ids"] == want.column("input_ids")[i].as_py()
        assert ds[i]["doc_lens"] == want.column("doc_lens")[i].as_py()
    files = [f["filename"] for f in ds.cache_files]
    # the shards in place; packer's own columns (and so every later cache) in datasets' cache folder
    assert files[0].startswith(str(datasets_cache)) and len(files) == 2 * len(m["shards"])
    assert files[1::2] == [os.path.join(short_docs_build, s["path"]) for s in m["shards"]]
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


def test_labels_seq_lengths_and_position_ids_are_packed_datasets(short_docs_build):
    from packer import PackedDataset

    ds, pd = hf_dataset(short_docs_build), PackedDataset(short_docs_build)
    L = pd.seq_len
    for i in range(len(ds)):
        row, want = ds[i], pd[i]
        assert row["labels"] == want["labels"].tolist()
        lens = want["doc_lens"].tolist()
        assert row["seq_lengths"] == lens + ([L - sum(lens)] if sum(lens) < L else [])
        assert row["position_ids"] == want["position_ids"].tolist()  # restarting at every segment
    plain = hf_dataset(short_docs_build, labels=False)
    assert "labels" not in plain[3] and plain[3]["position_ids"] == ds[3]["position_ids"]
    assert ds["labels"][5] == ds[5]["labels"] and ds[2:4]["position_ids"] == [ds[2]["position_ids"], ds[3]["position_ids"]]


def _bytes_under(path) -> int:
    return sum(os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(path) for n in names)


def test_opening_a_build_copies_next_to_nothing_into_the_cache(short_docs_build, tmp_path):
    """issue 55.2: a 77 MB build wrote 605 MB into ~/.cache (labels and position_ids as int64, 16 bytes a
    slot). They are made as rows are read now; only seq_lengths is written, into cache_dir."""
    from packer import PackedDataset

    cache = tmp_path / "cache"
    ds = hf_dataset(short_docs_build, cache_dir=str(cache))
    shards = sum(os.path.getsize(os.path.join(short_docs_build, s["path"])) for s in read_manifest(short_docs_build)["shards"])
    assert 0 < _bytes_under(cache) < shards // 10
    pd = PackedDataset(short_docs_build)
    for i in (0, len(ds) // 2, len(ds) - 1):  # the same rows as before
        assert ds[i]["input_ids"] == pd[i]["input_ids"].tolist() and ds[i]["labels"] == pd[i]["labels"].tolist()
        assert ds[i]["position_ids"] == pd[i]["position_ids"].tolist()


def test_trainer_removing_the_columns_its_model_does_not_take_keeps_labels_and_positions(short_docs_build):
    """HF Trainer calls remove_columns on doc_lens, seq_lengths, ...: what labels and position_ids are made
    from is hidden, not dropped."""
    ds = hf_dataset(short_docs_build)
    full = ds[1]
    kept = ds.remove_columns(["doc_lens", "doc_index", "doc_offset", "seq_lengths"])
    assert set(kept[1]) == {"input_ids", "labels", "position_ids"}
    assert all(kept[1][k] == full[k] for k in kept[1])
    assert set(kept.remove_columns("labels")[1]) == {"input_ids", "position_ids"}


def _tree(path):
    """{relative path: sha256} of every file under ``path``."""
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            f = os.path.join(root, n)
            out[os.path.relpath(f, path)] = hashlib.sha256(open(f, "rb").read()).hexdigest()
    return out


def test_nothing_done_through_the_dataset_writes_into_the_build(short_docs_build, copy_build, datasets_cache):
    """issue 30.2: map (with and without num_proc), filter, shuffle().flatten_indices(), select and
    train_test_split put their cache files in datasets' cache folder; OUT stays byte-identical."""
    from click.testing import CliRunner

    from packer.cli import main

    out = copy_build(short_docs_build)
    before = _tree(out)
    ds = hf_dataset(out)
    results = [
        ds.map(lambda r: {"n": len(r["doc_lens"])}),
        ds.map(lambda r: {"n": len(r["doc_lens"]), "two": 2}, num_proc=2),  # another function: not a cache hit
        ds.filter(lambda r: len(r["doc_lens"]) > 2),
        ds.shuffle(seed=0).flatten_indices(),
        ds.select(range(3, 40)),
        ds.select([5, 1, 9]),
    ]
    split = ds.train_test_split(test_size=0.25, seed=0)
    results += [split["train"], split["test"], split["train"].map(lambda r: {"m": 1})]
    assert results[0]["n"] == results[1]["n"] == [len(x) for x in ds["doc_lens"]]
    assert results[4][0]["input_ids"] == ds[3]["input_ids"] and len(results[3]) == len(ds)
    assert _tree(out) == before  # no file added, none changed
    for r in results:
        for f in r.cache_files:
            assert not f["filename"].startswith(out) or f["filename"] in {os.path.join(out, p) for p in before}
    made = [f for r in results for f in (x["filename"] for x in r.cache_files) if os.path.basename(f).startswith("cache-")]
    assert made and all(f.startswith(str(datasets_cache)) for f in made)
    assert CliRunner().invoke(main, ["stats", out]).exit_code == 0


def test_verify_catches_flipped_token_bytes(short_docs_build, copy_build):
    """issue 33.17: the dataset view gets PackedDataset's verify option."""
    out = copy_build(short_docs_build)
    m = read_manifest(out)
    shard = os.path.join(out, m["shards"][0]["path"])
    t = pa.ipc.open_file(shard).read_all()
    first = bytes(np.asarray(t.column("input_ids").chunk(0).flatten())[:4].tobytes())
    data = bytearray(open(shard, "rb").read())
    at = data.index(first)
    data[at] ^= 0x01  # a token id changes; the file stays a valid Arrow file of the same size
    open(shard, "wb").write(bytes(data))
    assert hf_dataset(out)[0]["input_ids"] != hf_dataset(short_docs_build)[0]["input_ids"]  # served unchecked
    with pytest.raises(ShardError, match="checksum mismatch"):
        hf_dataset(out, verify=True)
    assert len(hf_dataset(short_docs_build, verify=True)) == m["totals"]["rows"]


def test_a_chat_shard_without_its_loss_mask_is_refused(chat_build, copy_build):
    from packer.shards.schema import file_checksum

    out = copy_build(chat_build[0])
    m = read_manifest(out)
    ds = hf_dataset(out, verify=True)
    assert sum(int((np.array(r) != -100).sum()) for r in ds["labels"]) == m["totals"]["trained_tokens"]
    sh = m["shards"][0]
    path = os.path.join(out, sh["path"])
    t = pa.ipc.open_file(path).read_all().drop(["loss_mask"])
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, t.schema) as w:
        w.write_table(t)
    sh["bytes"], sh["xxh3_128"] = os.path.getsize(path), file_checksum(path)  # the checksum fixed
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(m, f)
    for verify in (False, True):
        with pytest.raises(ShardError, match="without its loss_mask"):
            hf_dataset(out, verify=verify)


def test_columns_are_made_once_and_an_unwritable_cache_is_one_line(short_docs_build, tmp_path, monkeypatch):
    first = [f["filename"] for f in hf_dataset(short_docs_build).cache_files[::2]]
    stamps = [os.stat(f).st_mtime_ns for f in first]
    assert [os.stat(f).st_mtime_ns for f in (x["filename"] for x in hf_dataset(short_docs_build).cache_files[::2])] \
        == stamps  # reused, not written again
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", blocker / "cache")
    with pytest.raises(PackerError, match="HF_DATASETS_CACHE"):
        hf_dataset(short_docs_build)
    with pytest.raises(PackerError, match="cache_dir="):
        hf_dataset(short_docs_build, cache_dir=str(blocker / "here"))


def test_units_that_hold_no_document_leave_no_gap(tmp_path, datasets_cache):
    """A document longer than a work unit leaves the next units' slices without a record start:
    their shards have no rows. The dataset is every other shard's rows, in order (datasets cannot
    concatenate a table of no record batches)."""
    from packer import PackedDataset, build

    corpus = tmp_path / "c.jsonl"
    words = " ".join(f"w{i}" for i in range(30000))  # ~200 kB: spans several 0.02 MB units
    corpus.write_text("\n".join(json.dumps({"text": t}) for t in ("first", words, "last")) + "\n")
    out = str(tmp_path / "out")
    build(str(corpus), out, seq_len=256, workers=1, unit_mb=0.02, quiet=True)
    assert any(sh["rows"] == 0 for sh in read_manifest(out)["shards"])
    ds, ref = hf_dataset(out), PackedDataset(out)
    assert len(ds) == len(ref) > 0
    for i in (0, len(ref) // 2, len(ref) - 1):
        assert ds[i]["input_ids"] == ref[i]["input_ids"].tolist()


@pytest.mark.skipif(not os.path.exists("/proc/sys/vm/max_map_count"), reason="Linux's cap on memory maps")
def test_a_build_past_the_systems_map_cap_is_refused_in_one_line_before_mapping(short_docs_build, monkeypatch):
    """datasets keeps two maps a shard; past vm.max_map_count a map would fail part way (an out-of-memory
    error from inside pyarrow). The margin stands in for a build of 40,000 shards here."""
    import packer.shards.hf_datasets as H

    cap = int(open("/proc/sys/vm/max_map_count").read())
    monkeypatch.setattr(H, "MAP_MARGIN", cap)
    before = sum(1 for _ in open("/proc/self/maps"))
    with pytest.raises(PackerError, match=r"vm.max_map_count .*use PackedDataset") as e:
        hf_dataset(short_docs_build)
    assert "\n" not in str(e.value) and short_docs_build in str(e.value)
    assert sum(1 for _ in open("/proc/self/maps")) <= before + 8  # refused before any shard was mapped
    monkeypatch.setattr(H, "MAP_MARGIN", 0)
    assert len(hf_dataset(short_docs_build)) == read_manifest(short_docs_build)["totals"]["rows"]
