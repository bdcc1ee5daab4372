"""packer/formats/json_array.py: .json files: arrays streamed element by element, JSON Lines named
.json read as .jsonl, each element parsed on its own (a bad one is one counted skip at its line)."""

from __future__ import annotations

import gzip
import json

import pytest

from packer.formats import discover, plan_slices, read_slice
from packer.formats.base import Document, Skip, Slice
from packer.formats.json_array import FORMAT, is_json_lines

from tests.formats.helpers import accounted, jl, run, skipped


def _file(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return discover([str(p)]).files[0]


@pytest.mark.parametrize("data, lines", [
    (jl({"text": "a"}, {"text": "b"}), True),
    (b"\xef\xbb\xbf  \n" + jl({"text": "a"}), True),  # a byte-order mark and blank lines before it
    (json.dumps([{"text": "a"}]).encode(), False),
    (json.dumps({"text": "a"}, indent=1).encode(), False),  # one object over several lines
    (b'"a string"\n', False),
    (b'{"text": "no end\n', False),
    (b"", False),
])
def test_is_json_lines_is_an_object_that_ends_on_the_first_line(tmp_path, data, lines):
    assert is_json_lines(_file(tmp_path, "a.json", data)) is lines
    assert is_json_lines(_file(tmp_path, "a.json.gz", gzip.compress(data))) is lines


def test_json_lines_named_json_is_cut_as_a_jsonl_and_an_array_is_one_slice(tmp_path):
    lines = jl(*({"text": f"doc {i}"} for i in range(400)))
    f = _file(tmp_path, "lines.json", lines)
    slices = FORMAT.plan(f, 1000)
    assert len(slices) > 1 and all(sl.file.format == "jsonl" for sl, _ in slices)
    assert [r.text for sl, _ in slices for r in read_slice(sl)] == [f"doc {i}" for i in range(400)]
    arr = _file(tmp_path, "array.json", json.dumps([{"text": f"doc {i}"} for i in range(400)]).encode())
    assert FORMAT.plan(arr, 1000) == [(Slice(arr, 0, arr.size), arr.size)]


def test_each_element_is_parsed_alone_and_named_by_its_line(tmp_path):
    data = b'[{"text": "a"},\n{"text": "caf\xe9"},\n{"text": 1,,},\n{"meta": {"t": "deep"}},\n"bare"]'
    f = _file(tmp_path, "a.json", data)
    (sl, _), = plan_slices((f,), 1 << 30)
    p = str(tmp_path / "a.json")
    assert list(read_slice(sl)) == [Document("a"), Skip("invalid_utf8", f"{p}:2"), Skip("malformed_json", f"{p}:3"),
                                    Skip("missing_field", f"{p}:4"), Skip("missing_field", f"{p}:5")]  # not an object: no field
    assert [type(r) for r in read_slice(sl, "meta.t")][3] is Document
    assert FORMAT.fields(sl) == ["text", "meta", "meta.t"]  # nested keys by their dotted path


def test_json_array_matrix_streamed(tmp_path):
    """A pretty-printed array: each element is one record at its own line; the cut-off end counts once."""
    good = json.dumps([{"text": "first"}, {"text": ""}, {"other": 1}, {"text": None}, {"text": "a,b]{c\"d"}], indent=2).encode()
    # Elements with bad UTF-8 and malformed JSON in the middle of an array that is cut off.
    body = b'[\n{"text": "one"},\n{"text": "caf\xe9"},\n{"text": 1,,},\n{"text": "two", "m": {"x": [1, 2]}},\n{"text": "thr'
    texts, m = run(tmp_path, {"a.json": good, "b.json": body, "c.json": b"[]", "d.json": b""})
    assert texts == [b"first", b'a,b]{c"d', b"one", b"two"]
    assert skipped(m) == {"empty": 1, "missing_field": 1, "not_string": 1, "invalid_utf8": 1, "malformed_json": 1,
                          "truncated": 1}
    ex = m["totals"]["skipped_examples"]
    assert ex["invalid_utf8"] == [str(tmp_path / "in" / "b.json") + ":3"]
    assert ex["missing_field"] == [str(tmp_path / "in" / "a.json") + ":8"]
    accounted(m, 5 + 5)
