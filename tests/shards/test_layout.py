"""The row layout index.arrow records (docs/format.md): what pyarrow alone finds in each shard, and
none (the reader parses the footer) where a shard is not regular or the index predates it."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from packer import shards as S
from packer.io import storage_for
from packer.shards.layout import NONE, shard_layout, stamp


def test_the_layout_is_where_pyarrow_finds_each_batchs_buffers(sample_build):
    t = pa.ipc.open_file(pa.memory_map(os.path.join(sample_build, "index.arrow"))).read_all()
    assert t.schema.metadata[b"packer_layout_version"] == b"1"
    m = S.read_manifest(sample_build)
    for k, e in enumerate(m["shards"]):
        src = pa.memory_map(os.path.join(sample_build, e["path"]))
        whole = src.read_buffer()
        r = pa.ipc.open_file(whole)
        batches = [r.get_batch(i) for i in range(r.num_record_batches)]
        assert t.column("batch_rows")[k].as_py() == batches[0].num_rows
        for name, find in (("ids_at", lambda b: b.column("input_ids").values.buffers()[1]),
                           ("lens_at", lambda b: b.column("doc_lens").buffers()[1]),
                           ("lens_values_at", lambda b: b.column("doc_lens").values.buffers()[1])):
            assert t.column(name)[k].as_py() == [find(b).address - whole.address for b in batches], (k, name)
        foot = t.column("footer_bytes")[k].as_py()
        assert whole.to_pybytes()[-6:] == b"ARROW1" and foot == int.from_bytes(whole.to_pybytes()[-10:-6], "little") + 10
        lists = [np.array(t.column(c)[k].as_py(), np.int64) for c in ("ids_at", "lens_at", "lens_values_at")]
        want = stamp(whole.to_pybytes()[-foot:], batches[0].num_rows, foot, lists)
        assert t.column("layout_xxh3_64")[k].as_py() == want


def test_an_index_table_made_without_layouts_has_none_of_their_columns(sample_build, tmp_path):
    m = S.read_manifest(sample_build)
    data = open(os.path.join(sample_build, "manifest.json"), "rb").read()
    t = S.index_table(m, data)
    assert "ids_at" not in t.column_names and b"packer_layout_version" not in t.schema.metadata
    x = S.open_index(storage_for(sample_build))
    assert x.layouts is not None and x.layouts.of(0)[0] == 1024


def test_irregular_or_foreign_shards_get_no_layout(tmp_path):
    L = 4
    ids = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(40, dtype=np.uint16)), L)
    lens = pa.array([[4]] * 10, pa.list_(pa.uint32()))
    t = pa.table({"input_ids": ids, "doc_lens": lens, "doc_index": lens, "doc_offset": lens})

    def file(sizes):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, t.schema) as w:
            at = 0
            for n in sizes:
                w.write_batch(t.slice(at, n).to_batches()[0])
                at += n
        return sink.getvalue()

    assert shard_layout(file([4, 4, 2]), 10, L, "uint16", False)[0] == 4
    assert shard_layout(file([3, 5, 2]), 10, L, "uint16", False) == NONE  # batches of unequal rows
    assert shard_layout(file([4, 4, 2]), 11, L, "uint16", False) == NONE  # not the manifest's row count
    assert shard_layout(file([4, 4, 2]), 10, L, "uint32", False) == NONE  # not the manifest's dtype
    assert shard_layout(file([4, 4, 2]), 10, L, "uint16", True) == NONE  # a chat build's shard without loss_mask
    assert shard_layout(b"not arrow at all", 10, L, "uint16", False) == NONE


def test_a_unit_record_carries_its_shards_layout(sample_build):
    """What an object-store build's index is made of: the record's layout is the file's."""
    import json

    from packer.shards.layout import from_record, to_record

    m = S.read_manifest(sample_build)
    lays = S.index.shard_layouts(storage_for(sample_build), m)
    for e, lay in zip(m["shards"], lays):
        rec = json.load(open(os.path.join(sample_build, "units", f"{e['unit']:06d}.json")))
        got = from_record(rec["layout"])
        assert got[:3] == lay[:3] and all(np.array_equal(a, b) for a, b in zip(got[3:6], lay[3:6])) and got[6] is None
        assert to_record(got) == rec["layout"]
    assert from_record(None) == NONE and from_record({"batch_rows": 4}) == NONE
