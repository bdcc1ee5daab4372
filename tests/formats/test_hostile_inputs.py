"""Inputs built to hurt a reader (issue 33, items 10-14): concatenated JSON, one huge array element,
runs of blank lines, columnar files replaced or oddly encoded. Each is read (and bounded), or counted
with its file and line; none is lost silently or ends in a traceback."""

from __future__ import annotations

import bz2
import json

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
