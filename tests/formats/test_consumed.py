"""packer/formats/consumed.py: the ranges a slice reads, and their hash, see every byte a unit used."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from packer.formats import discover, plan_slices
from packer.formats.consumed import digest, ranges
from tests.conftest import write_jsonl


def _slices(path, target):
    return [sl for sl, _ in plan_slices(discover([str(path)]).files, target)]


def test_a_jsonl_slice_reads_through_the_end_of_its_last_line(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [f"doc {i} " + "w " * (i % 9) for i in range(2000)])
    data = open(path, "rb").read()
    sls = _slices(path, 8 << 10)
    assert len(sls) > 3
    for sl in sls:
        (a, b), = ranges(sl)
        assert a == max(sl.start - 1, 0) and b >= sl.end and (b == len(data) or data[b - 1:b] == b"\n")
        assert b"\n" not in data[sl.end - 1:b - 1]  # no further than that line's end
    before = [digest(sl) for sl in sls]
    (a, b), = ranges(sls[1])
    edited = bytearray(data)
    edited[b - 3] = ord("W") if edited[b - 3] != ord("W") else ord("w")  # in unit 1's last line, past its end
    open(path, "wb").write(edited)
    after = [digest(sl) for sl in sls]
    assert after[1] != before[1] and after[0] == before[0] and after[3:] == before[3:]


def test_a_parquet_slice_hashes_its_row_groups_and_the_footer(tmp_path):
    path = str(tmp_path / "c.parquet")
    pq.write_table(pa.table({"text": [f"doc {i} " * 40 for i in range(4000)]}), path, row_group_size=500)
    sls = _slices(path, 64 << 10)
    assert len(sls) > 2 and all(len(ranges(sl)) == 2 for sl in sls)
    size = len(open(path, "rb").read())
    assert all(ranges(sl)[-1][1] == size for sl in sls)
    spans = [ranges(sl)[0] for sl in sls]
    assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:]))  # row groups of different slices apart
    assert len({digest(sl) for sl in sls}) == len(sls)
