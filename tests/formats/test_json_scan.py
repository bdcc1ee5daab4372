"""packer/formats/json_scan.py: cutting a stream of JSON values into the raw bytes of its records,
bounded, without parsing it: arrays, values back to back, text that is not JSON, escapes across reads."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from packer.formats.base import Document, Skip
from packer.formats.json_scan import split_array, string_end

from tests.formats.helpers import records


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


# Item 10: JSON values back to back are read, and text that is not JSON is counted where it is.
def test_concatenated_json_values_are_all_read_and_trailing_text_is_counted(tmp_path):
    """``cat a.json b.json`` (two arrays), objects back to back, a log line between values and text
    after the last ``]``: every record is read, each piece of text is one counted skip at its line
    (today: 2 of 5 documents, nothing counted)."""
    a = json.dumps([{"text": "one"}, {"text": "two"}], indent=1).encode()  # 8 lines
    b = json.dumps([{"text": "three"}]).encode()
    obj = json.dumps({"text": "four"}, indent=1).encode()  # 3 lines
    p = tmp_path / "all.json"
    p.write_bytes(a + b"\n" + b + b"\nINFO wrote b.json\nmore log\n" + obj + b' {"text": "five"} "six" ]\ntail')
    got = records(p)
    assert [r.text for r in got if type(r) is Document] == ["one", "two", "three", "four", "five"]
    skips = [(r.reason, r.where.split(" ")[0]) for r in got if type(r) is Skip]
    assert skips == [("malformed_json", f"{p}:10"), ("missing_field", f"{p}:14"), ("malformed_json", f"{p}:14")]


def test_a_file_that_is_not_json_is_one_counted_record(tmp_path):
    p = tmp_path / "notes.json"
    p.write_bytes(b"hello\nworld\n" * 1000)
    assert [r.reason for r in records(p)] == ["malformed_json"]


# Item 11: one huge element is skipped without being held.
_PEAK = """
import sys
from packer.formats import discover, plan_slices, read_slice

def peak():  # VmHWM: this process's peak resident memory (ru_maxrss would carry the parent's over the exec)
    return int([line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]) * 1024

for path in sys.argv[1:]:
    (sl, _), = plan_slices(discover([path]).files, 1 << 40)
    kinds = {}
    for r in read_slice(sl, max_record=1 << 20):
        kinds[getattr(r, "reason", "doc")] = kinds.get(getattr(r, "reason", "doc"), 0) + 1
    print(sorted(kinds.items()), peak())
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="peak memory read from /proc (Linux)")
def test_an_element_over_max_record_is_skipped_in_bounded_memory(tmp_path):
    """A 64 MiB element under --max-record-mb 1 is one too_long skip, and the reader's peak memory
    grows by far less than the element (it peaked at twice a 1 GiB element under --max-record-mb 4):
    measured against the same bytes as 100 KB records, read the same way."""
    size = 64 << 20
    big, small = tmp_path / "big.json", tmp_path / "small.json"
    escaped = (("x" * 4000 + '\\"\\\\') * (size // 4004))[:size - 1] + "x"  # escaped quotes and backslashes in it
    big.write_bytes(b'[{"text": "before"},\n{"text": "' + escaped.encode() + b'", "n": [1, {"k": "]"}]},\n{"text": "after"}]')
    rec = json.dumps({"text": "y" * 100_000}).encode()
    small.write_bytes(b"[" + b",\n".join([rec] * (size // len(rec))) + b"]")
    out = subprocess.run([sys.executable, "-c", _PEAK, str(small), str(big)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    (kinds_small, peak_small), (kinds_big, peak_big) = (line.rsplit(" ", 1) for line in out)
    assert kinds_small == f"[('doc', {size // len(rec)})]" and kinds_big == "[('doc', 2), ('too_long', 1)]"
    # What the big element added to the peak of reading the records: about 11-12 MB whatever its size (32 MiB
    # and 128 MiB measured: read blocks and --max-record-mb), 143 MB for this one when it was held whole. On a
    # loaded machine the read-ahead also fills while the element is scanned (23 MB seen with two suites at
    # once on 2 cores): the bound is the reader's own buffers, its read-ahead and a few MiB, far below the element.
    from packer.io.readahead import READ_BLOCK, READ_DEPTH

    grew, bound = int(peak_big) - int(peak_small), READ_DEPTH * READ_BLOCK + (8 << 20)
    assert grew < bound <= size // 2, f"peak grew by {grew:,} bytes for a {size:,}-byte element skipped"


def test_split_array_keeps_escapes_across_reads_while_letting_a_long_element_go():
    """Element strings full of backslash runs and escaped quotes, read 7 bytes at a time under a
    20-byte limit: the long ones are too_long (let go as they are scanned), the short ones after
    them are cut exactly, whatever read the escapes fall on."""
    texts = ['\\' * n + '"' + "]},[" * (n % 4) for n in range(40)]
    data = ("[" + ", ".join(json.dumps({"t": t}) + ', {"t": "ok"}' for t in texts) + "]").encode()
    got = list(split_array(io.BytesIO(data).read, "f.json", block=7, max_record=20))
    for k, t in enumerate(texts):
        (_, long_or_not), (_, ok) = got[2 * k], got[2 * k + 1]
        if len(json.dumps({"t": t})) > 40:  # past the limit by more than a read: let go
            assert type(long_or_not) is Skip and long_or_not.reason == "too_long"
        elif type(long_or_not) is bytes:
            assert json.loads(long_or_not) == {"t": t}
        assert json.loads(ok) == {"t": "ok"}
    assert len(got) == 2 * len(texts)
