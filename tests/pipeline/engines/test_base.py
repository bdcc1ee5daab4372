"""packer/pipeline/engines/base.py: the chunk cut every engine shares, progress, the first task."""

from __future__ import annotations

from packer.formats import DEFAULT_MAX_RECORD, discover, parse_part, plan_slices, read_slice
from packer.pipeline import plan_units
from packer.pipeline.engines import base
from packer.pipeline.engines.base import Chunk, FirstTask, Progress, UnitEnd, chunks_at_most, cut_chunks
from tests.conftest import write_jsonl


def _units(tmp_path, unit_bytes=50_000):
    for k in range(3):
        write_jsonl(tmp_path / f"{k}.jsonl", [f"{k}/{i} " + "w " * (i % 300) for i in range(600)])
    return plan_units(plan_slices(discover([str(tmp_path)]).files, 20_000), unit_bytes)


def test_chunks_hold_every_record_once_in_order_whatever_the_chunk_size(tmp_path, monkeypatch):
    units = _units(tmp_path)
    want = [r for u in units for sl in u.slices for r in read_slice(sl)]
    for size in (1, 5_000, 1 << 30):
        monkeypatch.setattr(base, "PART_BYTES", size)
        events = list(cut_chunks(units, "text", DEFAULT_MAX_RECORD))
        got = [r for e in events if isinstance(e, Chunk) for p in e.parts for r in parse_part(p, ("text",))]
        assert got == want
        assert [e.unit.index for e in events if isinstance(e, UnitEnd)] == [u.index for u in units]
        assert sum(isinstance(e, Chunk) for e in events) <= chunks_at_most(units) or size == 1


def test_on_unit_is_called_once_per_unit_before_its_chunks(tmp_path):
    units = _units(tmp_path)
    seen, order = [], []
    for e in cut_chunks(units, "text", DEFAULT_MAX_RECORD, on_unit=seen.append):
        order.append((len(seen), e.unit.index))
    assert [u.index for u in seen] == [u.index for u in units]
    assert all(n == unit + 1 for n, unit in order)  # unit k's events come after on_unit(k), before on_unit(k+1)


def test_progress_counts_bytes_documents_and_units():
    class U:
        def __init__(self, index, weight):
            self.index, self.weight = index, weight

    units = [U(0, 100), U(1, 200), U(2, 700)]
    calls = []
    p = Progress(lambda *a: calls.append(a), units, done=[1])
    p.report()
    assert calls[-1] == (200, 0, 0, 1, 3, 1000)  # a resumed unit's bytes count as done from the start
    p.read(500)  # read ahead by the reader: not done
    p.tokenized(3, 40, units[2], 50)
    assert calls[-1] == (250, 3, 40, 1, 3, 1000)  # a chunk's bytes count once it is tokenized
    p.tokenized(1, 10, units[2], 10_000)
    assert calls[-1][0] == 900  # a unit's chunks count at most its bytes
    p.unit_done(units[2], docs=2, tokens=10)
    assert calls[-1] == (900, 6, 60, 2, 3, 1000)  # (its chunks' bytes become the unit's: counted once)
    p.unit_done(units[0])
    assert calls[-1][0] == 1000 and [c[0] for c in calls] == sorted(c[0] for c in calls)  # only ever grows


def test_first_task_run_here_returns_its_verdict():
    seen = []
    task = FirstTask(lambda job, x: (job, x), (7,), lambda r: seen.append(r) or r[1] > 5)
    assert task.run_here("job") is True and seen == [("job", 7)]
