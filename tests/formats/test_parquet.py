"""packer/formats/parquet.py: text columns of every string type and struct fields are read; a cell of
invalid UTF-8 is a counted skip."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packer.errors import PackerError
from tests.formats.test_awkward_inputs import run, skipped


def test_parquet_cell_of_invalid_utf8_is_skipped_and_counted(tmp_path):
    col = pa.array([b"good", b"caf\xe9", b"also good"], pa.binary()).view(pa.string())
    p = tmp_path / "in" / "a.parquet"
    p.parent.mkdir()
    pq.write_table(pa.table({"text": col}), p)
    texts, m = run(tmp_path, {})
    assert texts == [b"good", b"also good"]
    assert skipped(m) == {"invalid_utf8": 1}
    assert m["totals"]["skipped_examples"]["invalid_utf8"][0].endswith("a.parquet: row 1")


# 12. Data that should be read.
@pytest.mark.parametrize("kind", ["dictionary", "string_view", "large_string"])
def test_parquet_text_columns_of_other_string_types_are_read(tmp_path, kind):
    texts = ["alpha", "beta", "alpha"]
    if kind == "dictionary":
        col = pa.array(texts).dictionary_encode()
    elif kind == "string_view":
        if not hasattr(pa, "string_view"):
            pytest.skip("pyarrow without string_view")
        col = pa.array(texts, pa.string_view())
    else:
        col = pa.array(texts, pa.large_string())
    p = tmp_path / "in" / "a.parquet"
    p.parent.mkdir()
    pq.write_table(pa.table({"text": col}), p)
    got, m = run(tmp_path, {})
    assert got == [t.encode() for t in texts] and skipped(m) == {}


def test_parquet_nested_struct_field(tmp_path):
    meta = pa.array([{"body": "first", "n": 1}, None, {"body": None, "n": 3}, {"body": "last", "n": 4}])
    p = tmp_path / "in" / "a.parquet"
    p.parent.mkdir()
    pq.write_table(pa.table({"meta": meta, "id": [1, 2, 3, 4]}), p)
    got, m = run(tmp_path, {}, text_field="meta.body")
    assert got == [b"first", b"last"]
    assert skipped(m) == {"not_string": 2}  # a null struct, a null body
    # A field that no row has: every record missing_field, so no document: one line naming the columns.
    with pytest.raises(PackerError, match=r"all 4 records were skipped \(missing_field 4\).*the records have: meta, id"):
        run(tmp_path / "again", {"a.parquet": p.read_bytes()}, text_field="meta.nope")



# Moved from test_hostile_inputs (now gone) (issue 33 item 13).
from packer.formats import Document, discover, plan_slices, read_slice  # noqa: E402


# Item 13: a parquet file replaced while it is read; Arrow's encoded text columns.
def test_parquet_replaced_by_rename_while_read_is_counted_not_a_traceback(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [f"t{i}" for i in range(300)]}), p, row_group_size=100)
    slices = [sl for sl, _ in plan_slices(discover([str(p)]).files, 1)]
    assert len(slices) == 3
    pq.write_table(pa.table({"text": ["new"]}), tmp_path / "b.tmp")
    (tmp_path / "b.tmp").rename(p)  # one row group now, where three were planned
    got = [list(read_slice(sl)) for sl in slices]
    assert got[0] == [Document("new"), got[0][1]] and got[0][1].reason == "truncated"
    for recs in got[1:]:
        assert [r.reason for r in recs] == ["truncated"]
        assert "changed while it was read (it holds 1 row group now" in recs[0].where
    (tmp_path / "c.tmp").write_bytes(b"not parquet at all" * 10)
    (tmp_path / "c.tmp").rename(p)
    recs = list(read_slice(slices[0]))
    assert [r.reason for r in recs] == ["truncated"] and recs[0].where.startswith(f"{p}: ")
