"""Inputs built to hurt a reader (issue 33, items 10-14): concatenated JSON, one huge array element,
runs of blank lines, columnar files replaced or oddly encoded. Each is read (and bounded), or counted
with its file and line; none is lost silently or ends in a traceback."""

from __future__ import annotations

import bz2
import json
import os
import subprocess
import sys

import pytest

from packer.formats import Document, Skip, discover, iter_parts, plan_slices, read_slice


def records(path, target: int = 1 << 30) -> list:
    return [r for sl, _ in plan_slices(discover([str(path)]).files, target) for r in read_slice(sl)]


# Item 12: blank lines cost what reading them costs.
@pytest.mark.parametrize("name, pack", [("a.jsonl", None), ("a.jsonl.bz2", bz2.compress), ("a.json", None)])
def test_a_run_of_blank_lines_is_one_item_and_lines_stay_counted(tmp_path, name, pack):
    """200,000 blank lines (with spaces and CRs) between records: read as a few items (not one
    parsed line each, which cost 2 µs a line: 100 MB of them took 207 s), and the records after
    them keep their line numbers, whatever the slices and parts."""
    blanks = b"\n \r\n\t\n\n" * 50_000
    data = b'{"text": "a"}\n' + blanks + b'{"text": 1}\n\n\n{"text": "b"}\n' + blanks + b'{"x": 2}\n  \n'
    p = tmp_path / name
    p.write_bytes(pack(data) if pack else data)
    want = [Document("a"), Skip("not_string", f"{p}:200002"), Document("b"), Skip("missing_field", f"{p}:400006")]
    for target in (1 << 30, 100_000, 7_777):  # whole, and cut into byte ranges (plain jsonl only)
        assert records(p, target) == want
    (sl, _), = plan_slices(discover([str(p)]).files, 1 << 30)
    items = sum(len(part.items) for part in iter_parts(sl, part_bytes=4096))
    # 8 items (4 records, 3 runs, a last blank line), and at most one more where a read block ends mid-line
    assert items <= 8 + len(data) // (64 << 10), f"{items} items for 4 records and 400,000 blank lines"


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
    # and 128 MiB measured: read blocks and --max-record-mb), 143 MB for this one when it was held whole.
    grew = int(peak_big) - int(peak_small)
    assert grew < size // 3, f"peak grew by {grew:,} bytes for a {size:,}-byte element skipped"


def test_split_array_keeps_escapes_across_reads_while_letting_a_long_element_go():
    """Element strings full of backslash runs and escaped quotes, read 7 bytes at a time under a
    20-byte limit: the long ones are too_long (let go as they are scanned), the short ones after
    them are cut exactly, whatever read the escapes fall on."""
    import io

    from packer.formats.json_scan import split_array

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


def test_arrow_dictionary_and_run_end_encoded_text_columns_are_read(tmp_path):
    import pyarrow as pa
    import pyarrow.compute as pc

    plain = pa.array(["a", "b", None, "a", ""])
    for name, col in (("dict", plain.dictionary_encode()), ("ree", pc.run_end_encode(plain)),
                      ("large_dict", plain.cast(pa.large_string()).dictionary_encode())):
        p = tmp_path / f"{name}.arrow"
        with pa.ipc.new_stream(str(p), pa.schema([("text", col.type)])) as w:
            w.write_batch(pa.record_batch([col], names=["text"]))
        recs = records(p)
        assert recs[:2] == [Document("a"), Document("b")] and recs[3] == Document("a"), name
        assert [r.reason for r in (recs[2], recs[4])] == ["not_string", "empty"], name


def test_limit_counts_the_lines_a_run_of_blank_lines_holds(tmp_path):
    """--limit N reads the first N lines, blank ones included, as before blank runs were one item."""
    from dataclasses import replace

    from packer.formats import parse_part

    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "one"}\n' + b"\n" * 5 + b'{"text": "two"}\n{"text": "three"}\n')
    (sl, _), = plan_slices(discover([str(p)]).files, 1 << 30)
    for limit, want in ((1, ["one"]), (6, ["one"]), (7, ["one", "two"]), (8, ["one", "two", "three"])):
        got = [r.text for part in iter_parts(replace(sl, max_items=limit)) for r in parse_part(part, ("text",))]
        assert got == want, limit
