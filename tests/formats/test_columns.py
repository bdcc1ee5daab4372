"""packer/formats/columns.py: records from an Arrow column of texts (parquet and arrow share it): a row
of bad UTF-8, null, empty or over --max-record-mb is one counted skip at its row; encoded strings are text."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from packer.formats.base import Document, Skip
from packer.formats.columns import as_text, column_records, is_text_type, missing_rows

from tests.formats.helpers import records


def test_text_types_are_the_three_string_types():
    assert all(is_text_type(t) for t in (pa.string(), pa.large_string(), pa.string_view()))
    assert not any(is_text_type(t) for t in (pa.binary(), pa.int64(), pa.dictionary(pa.int32(), pa.string()),
                                             pa.list_(pa.string()), pa.struct([("t", pa.string())])))


def test_as_text_decodes_dictionaries_and_run_ends_of_strings_only():
    plain = pa.array(["a", "b", None, "a"])
    for col in (plain.dictionary_encode(), pc.run_end_encode(plain), plain.cast(pa.large_string()).dictionary_encode()):
        assert as_text(col).to_pylist() == plain.to_pylist() and is_text_type(as_text(col).type)
    ints = pa.array([1, 2, 1]).dictionary_encode()
    assert as_text(ints) is ints and as_text(plain) is plain


def test_each_row_is_a_document_or_a_skip_at_its_row():
    col = pa.array([b"ok", b"caf\xe9", None, b"", b"long text", b" "], pa.binary()).view(pa.string())
    limit = f"{5 / (1 << 20):g}"
    assert list(column_records(col, "p", 10, max_record=5)) == [
        Document("ok"), Skip("invalid_utf8", "p: row 11"), Skip("not_string", "p: row 12"), Skip("empty", "p: row 13"),
        Skip("too_long", f"p: row 14 (over --max-record-mb {limit})"), Document(" ")]
    assert list(column_records(col.slice(4, 1), "p", 0)) == [Document("long text")]  # no limit given
    assert list(column_records(pa.array([1, 2]), "p", 0)) == [Skip("not_string", "p: row 0"),
                                                             Skip("not_string", "p: row 1")]
    assert list(missing_rows("p", "text", 3, 2)) == [Skip("missing_field", "p: row 3 (no column 'text')"),
                                                    Skip("missing_field", "p: row 4 (no column 'text')")]


def test_the_limit_is_in_utf8_bytes_not_characters():
    # 3 characters, 6 UTF-8 bytes: over a 5-byte limit; 5 bytes exactly is kept
    assert [r.reason for r in column_records(pa.array(["é" * 3]), "p", 0, max_record=5)] == ["too_long"]
    assert list(column_records(pa.array(["é" * 2 + "a"]), "p", 0, max_record=5)) == [Document("é" * 2 + "a")]
    assert [r.reason for r in column_records(pa.array(["é" * 3]).dictionary_encode(), "p", 0, max_record=5)] == ["too_long"]


def test_arrow_dictionary_and_run_end_encoded_text_columns_are_read(tmp_path):
    plain = pa.array(["a", "b", None, "a", ""])
    for name, col in (("dict", plain.dictionary_encode()), ("ree", pc.run_end_encode(plain)),
                      ("large_dict", plain.cast(pa.large_string()).dictionary_encode())):
        p = tmp_path / f"{name}.arrow"
        with pa.ipc.new_stream(str(p), pa.schema([("text", col.type)])) as w:
            w.write_batch(pa.record_batch([col], names=["text"]))
        recs = records(p)
        assert recs[:2] == [Document("a"), Document("b")] and recs[3] == Document("a"), name
        assert [r.reason for r in (recs[2], recs[4])] == ["not_string", "empty"], name
