"""packer/formats/jsonl.py: JSON values Python's int and str hold but other parsers may not are kept."""

from __future__ import annotations

from tests.formats.test_awkward_inputs import run, skipped


def test_json_wide_integers_and_lone_surrogates_elsewhere_are_kept(tmp_path):
    lines = (b'{"text": "wide", "id": 123456789012345678901234567890123}',
             b'{"text": "neg", "id": -340282366920938463463374607431768211456}',
             b'{"text": "sur", "note": "\\ud800"}',
             b'{"meta": {"x": "\\udfff"}, "text": "nested sur"}')
    got, m = run(tmp_path, {"a.jsonl": b"\n".join(lines) + b"\n"})
    assert got == [b"wide", b"neg", b"sur", b"nested sur"] and skipped(m) == {}



# Moved from test_hostile_inputs (now gone) (issue 33 items 12, 13).
import bz2  # noqa: E402

import pytest  # noqa: E402

from packer.formats import Document, Skip, discover, iter_parts, plan_slices  # noqa: E402
from tests.formats.helpers import records  # noqa: E402


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


def test_line_counts_from_kept_marks_match_a_count_from_the_start_and_a_rewrite_starts_afresh(tmp_path):
    import random

    from packer.formats import jsonl

    p = tmp_path / "a.jsonl"
    data = b"".join(b"x" * random.Random(i).randrange(0, 300) + b"\n" for i in range(3000))
    p.write_bytes(data)
    for byte in random.Random(1).sample(range(len(data)), 200):  # in no order: marks before and after
        assert jsonl._count_lines_before(str(p), byte) == data[:byte].count(b"\n")
    p.write_bytes(b"\n" * len(data))  # same size, rewritten: the old marks must not be used
    assert jsonl._count_lines_before(str(p), 5000) == 5000


def test_a_huge_line_let_go_once_parsed_keeps_every_records_file_line(tmp_path):
    """Issue 53.3: Format.let_go drops a parsed line of LET_GO_BYTES or more from its Part (its str is
    all a build needs); where_of_record names every record as before, and the bytes are gone."""
    from packer.formats import let_go, parse_part, where_of_record
    from packer.formats.base import LET_GO_BYTES

    huge = '{"text": "' + "w" * LET_GO_BYTES + '"}'
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(['{"text": "a"}', "", huge, "not json", '{"text": "b"}']) + "\n")
    parts = [p for sl, _ in plan_slices(discover([str(path)]).files, 1 << 30) for p in iter_parts(sl, "text")]
    before = [[where_of_record(p, r) for r, _ in enumerate(parse_part(p, ("text",)))] for p in parts]
    for p in parts:
        let_go(p)
    assert max(len(x) for p in parts for x in p.items) < LET_GO_BYTES
    assert [[where_of_record(p, r) for r in range(len(w))] for p, w in zip(parts, before)] == before
    assert sum(before, []) == [f"{path}:1", f"{path}:3", f"{path}:4", f"{path}:5"]
