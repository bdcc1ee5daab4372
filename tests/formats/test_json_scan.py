"""packer/formats/json_scan.py: cutting a stream of JSON values into the raw bytes of its records,
bounded, without parsing it: arrays, values back to back, text that is not JSON, escapes across reads."""

from __future__ import annotations

import io
import json

import pytest

from packer.formats.base import Skip
from packer.formats.json_scan import split_array, string_end


def _split(data: bytes, block: int, **kw) -> list:
    return list(split_array(io.BytesIO(data).read, "f.json", block=block, **kw))


@pytest.mark.parametrize("block", [3, 7, 1 << 20])
def test_top_level_values_are_records_at_their_lines_whatever_the_read_size(block):
    """Objects, strings and each element of an array at the top level are records, cut to their bytes
    (the whitespace before them dropped, a byte-order mark at the start too; an element keeps what
    follows it up to its comma or bracket), with the line each starts on; an empty array holds none."""
    data = b'\xef\xbb\xbf{"a": 1}\n"s" [1, {"b": [2, "]"]}]\n[]\n  [\n  "last"\n]\n'
    assert _split(data, block) == [(1, b'{"a": 1}'), (2, b'"s"'), (2, b"1"), (2, b'{"b": [2, "]"]}'),
                                   (5, b'"last"\n')]


@pytest.mark.parametrize("block", [1, 5, 1 << 20])
def test_a_cut_array_ends_in_one_bare_truncated_and_a_cut_value_is_malformed(block):
    assert _split(b'[{"t": 1},\n {"t": "x', block) == [
        (1, b'{"t": 1}'), Skip("truncated", "f.json:2 (the JSON array is cut off)")]
    assert _split(b'[1,\n', block) == [(1, b"1"), Skip("truncated", "f.json:2 (the JSON array is cut off)")]
    assert _split(b'{"text": "x', block) == [
        (1, Skip("malformed_json", "f.json:1 (a JSON value that the file ends inside)"))]
    assert _split(b"", block) == [] and _split(b" \n\t ", block) == []


@pytest.mark.parametrize("block", [1, 4, 1 << 20])
def test_text_that_is_not_json_is_one_skip_up_to_the_next_value(block):
    got = _split(b"[1, 2]\n\nlog line\nmore [not a start\n[3]\ntail", block)
    assert got == [(1, b"1"), (1, b"2"),
                   (3, Skip("malformed_json", "f.json:3 (text that is not JSON, between the JSON values)")),
                   (5, b"3"),
                   (6, Skip("malformed_json", "f.json:6 (text that is not JSON, after the JSON values)"))]


def test_a_record_over_max_record_is_too_long_and_the_next_is_cut_exactly():
    data = b'[{"t": "' + b"x" * 5000 + b'"}, {"t": "ok"}]'
    got = _split(data, 64, max_record=1000)
    assert got == [(1, Skip("too_long", f"f.json:1 (over --max-record-mb {1000 / (1 << 20):g})")), (1, b'{"t": "ok"}')]
    assert _split(data, 64) == [(1, data[1:5010]), (1, b'{"t": "ok"}')]  # no limit: kept whole


def test_json_array_longer_than_a_read_block():
    texts = ["x" * 3000 + str(i) + '\\"' for i in range(50)]
    data = ("[" + ",\n".join(json.dumps({"text": t, "n": [i, {"k": "]"}]}) for i, t in enumerate(texts)) + "]").encode()
    els = list(split_array(io.BytesIO(data).read, "f.json", block=1000))  # every element spans several reads
    assert [json.loads(raw)["text"] for _, raw in els] == texts
    assert [line for line, _ in els] == list(range(1, 51))


@pytest.mark.parametrize("text", ['plain', 'a\\"b', 'ends in a backslash \\', '\\\\\\"', '"', '', 'é ] } , {'])
def test_json_string_end_respects_escapes(text):
    enc = json.dumps(text).encode()  # the JSON string, quotes included
    buf = b'{"k": ' + enc + b', "n": 1}'
    start = buf.index(enc) + 1
    assert string_end(buf, start) == start + len(enc) - 1
    assert string_end(enc[:-1], 1) == -1  # not closed within the buffer
