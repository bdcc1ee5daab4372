"""A finished build read back as documents (packer/repacking/source.py): every document's tokens exactly,
in input order, with the pieces' bookkeeping checked against itself and the manifest."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest

from packer import shards as S
from packer.errors import ShardError
from packer.repacking import open_source, shard_documents, shard_rows

from ..conftest import read_documents


def _all_documents(out):
    src = open_source(out)
    docs = []
    for e in src.manifest["shards"]:
        d = shard_documents(src.store, e, src.seq_len, src.manifest["dtype"], src.chat)
        starts = np.cumsum(d.lengths) - d.lengths
        docs += [d.tokens[a:a + n] for a, n in zip(starts.tolist(), d.lengths.tolist())]
    return src, docs


@pytest.mark.parametrize("n", [512, 2048])
def test_documents_come_back_exactly_in_order(fresh, n):
    src, docs = _all_documents(fresh[n])
    want, m = read_documents(fresh[n])  # pyarrow alone, as docs/format.md says a reader may
    assert len(docs) == len(want) == m["totals"]["documents"]
    assert all(np.array_equal(a, b) for a, b in zip(docs, want))
    assert src.holdout is not None and src.holdout.manifest["totals"]["documents"] == m["holdout"]["documents"]
    assert all(d[-1] == m["eos_id"] for d in docs)


def test_the_documents_do_not_depend_on_the_length_they_were_packed_at(fresh):
    assert all(np.array_equal(a, b) for a, b in zip(_all_documents(fresh[512])[1], _all_documents(fresh[2048])[1]))


def _rewrite(path, column, fn):
    """Rewrite shard ``path`` with one list column's values changed by ``fn`` (a valid Arrow file whose
    bookkeeping lies), returning the new bytes."""
    t = pa.ipc.open_file(pa.memory_map(path)).read_all().combine_chunks()
    col = t.column(column).chunk(0)
    vals = fn(col.values.to_numpy().copy())
    t = t.set_column(t.schema.get_field_index(column), column, pa.ListArray.from_arrays(col.offsets, pa.array(vals)))
    data = S.table_bytes(t)
    open(path, "wb").write(data)
    return data


@pytest.mark.parametrize("column,fn", [
    ("doc_offset", lambda v: v + (np.arange(len(v)) == 3)),  # a gap inside a document
    ("doc_index", lambda v: np.where(v == 1, 0, v).astype(np.uint32)),  # two documents' pieces mixed up
])
def test_pieces_that_do_not_join_up_are_named(fresh, tmp_path, column, fn):
    out = str(tmp_path / "b")
    shutil.copytree(fresh[512], out)
    m = json.load(open(os.path.join(out, "manifest.json")))
    e = m["shards"][0]
    data = _rewrite(os.path.join(out, e["path"]), column, fn)
    e = {**e, "bytes": len(data), S.CHECKSUM: S.checksum(data)}  # the manifest agrees: only the pieces lie
    with pytest.raises(ShardError, match="000000.arrow: its document pieces do not join up"):
        shard_documents(open_source(out).store, e, 512, m["dtype"], False)


def test_a_shard_that_differs_from_its_entry_is_refused(fresh, tmp_path):
    out = str(tmp_path / "b")
    shutil.copytree(fresh[512], out)
    src = open_source(out)
    e = src.manifest["shards"][1]
    with open(os.path.join(out, e["path"]), "r+b") as f:
        f.seek(e["bytes"] // 2)
        b = f.read(1)
        f.seek(e["bytes"] // 2)
        f.write(bytes([b[0] ^ 1]))
    for read in (shard_documents, shard_rows):
        with pytest.raises(ShardError, match="000001.arrow: shard differs from its manifest entry"):
            read(src.store, e, 512, src.manifest["dtype"], False)
    os.remove(os.path.join(out, e["path"]))
    with pytest.raises(ShardError, match="cannot read shard"):
        shard_documents(src.store, e, 512, src.manifest["dtype"], False)


def test_shard_rows_are_the_checked_packed_rows(sample_build):
    """What packer export --format mds writes: each shard's rows as stored (the damaged case: above)."""
    src = open_source(sample_build)
    rows = sum(shard_rows(src.store, e, src.seq_len, src.manifest["dtype"], False).num_rows for e in src.manifest["shards"])
    assert rows == src.manifest["totals"]["rows"]
