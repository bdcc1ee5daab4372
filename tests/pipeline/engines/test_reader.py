"""packer/pipeline/engines/reader.py: the local engine's reader thread and its window of units."""

from __future__ import annotations

import queue
import threading

from packer.formats import discover, plan_slices
from packer.pipeline import Job, OutputSettings, RunSettings, plan_units
from packer.pipeline.engines.base import Chunk, UnitEnd
from packer.pipeline.engines.reader import ReaderDone, ReaderFailed, Window, read_units
from packer.tokenize import resolve_tokenizer
from tests.conftest import write_jsonl


def test_the_reader_posts_every_chunk_then_each_units_end_then_done(tmp_path):
    for k in range(3):
        write_jsonl(tmp_path / f"{k}.jsonl", [f"{k}:{i} " + "y" * 400 for i in range(2000)])
    units = plan_units(plan_slices(discover([str(tmp_path)]).files, 300_000), 400_000)
    job = Job(str(tmp_path / "o"), OutputSettings(seq_len=64), RunSettings(), resolve_tokenizer(None), "uint16")
    events: queue.Queue = queue.Queue()
    slots = threading.Semaphore(1000)
    read_units(units, job, events, slots, Window(1 << 40), threading.Event(), lambda n: None)
    got = []
    while not events.empty():
        got.append(events.get())
    assert isinstance(got[-1], ReaderDone) and not any(isinstance(e, ReaderFailed) for e in got)
    ends = [e for e in got if isinstance(e, UnitEnd)]
    assert [e.unit.index for e in ends] == [u.index for u in units]
    for end in ends:  # a unit's chunks come before its end, numbered 0.., as many as the end says
        seqs = [e.seq for e in got[: got.index(end)] if isinstance(e, Chunk) and e.unit is end.unit]
        assert seqs == list(range(end.chunks))


def test_a_stopped_reader_leaves_without_posting_more(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", ["z" * 300] * 5000)
    units = plan_units(plan_slices(discover([str(tmp_path)]).files, 1 << 20), 1 << 20)
    job = Job(str(tmp_path / "o"), OutputSettings(seq_len=64), RunSettings(), resolve_tokenizer(None), "uint16")
    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    stop.set()
    read_units(units, job, events, threading.Semaphore(0), Window(1 << 40), stop, lambda n: None)
    assert all(not isinstance(e, Chunk) for e in list(events.queue))


def test_unit_window_admits_two_units_or_small_ones():
    w = Window(limit=100)
    assert w.enter(500) and w.enter(500)  # two units always fit, however large
    assert not w.enter(1, timeout=0.01)  # a third must wait: 1000 bytes are over the limit
    w.leave(500)
    w.leave(500)
    assert all(w.enter(30) for _ in range(3))  # small units: as many as the limit holds
    assert not w.enter(30, timeout=0.01)


def test_unit_window_admits_two_more_while_the_first_task_runs():
    w = Window(limit=100, waiting=True)
    assert all(w.enter(500) for _ in range(4))  # assembly is held back: two more units are read meanwhile
    assert not w.enter(500, timeout=0.01)
    w.open()  # the check is back: the usual two
    for _ in range(2):
        w.leave(500)
    assert not w.enter(500, timeout=0.01)  # still two in
    w.leave(500)
    assert w.enter(500, timeout=0.01)


def _records(parts, field=("text",)):
    from packer.formats import parse_part

    return [r for p in parts for r in parse_part(p, field)]


def _job(tmp_path):
    return Job(str(tmp_path / "o"), OutputSettings(seq_len=64), RunSettings(), resolve_tokenizer(None), "uint16")


def test_spans_cut_plain_jsonl_into_ranges_and_leave_the_rest_to_the_reader(tmp_path, monkeypatch):
    import dataclasses

    from packer.pipeline.engines import reader

    monkeypatch.setattr(reader, "RANGE_BYTES", 1000)
    write_jsonl(tmp_path / "a.jsonl", ["x" * 90] * 100)  # 10,400 bytes
    (tmp_path / "b.txt").write_text("text")
    big = {f.path: f for f in discover([str(tmp_path)]).files}
    sl = plan_slices((big[str(tmp_path / "a.jsonl")],), 1 << 20)[0][0]
    spans = reader.spans_of(sl)
    assert [(s.start, s.end) for s in spans] == [(a, min(a + 1000, sl.end)) for a in range(0, sl.end, 1000)]
    assert reader.spans_of(plan_slices((big[str(tmp_path / "b.txt")],), 1 << 20)[0][0]) is None
    assert reader.spans_of(dataclasses.replace(sl, max_items=5)) is None  # --limit's cut: read in order here
    zst = dataclasses.replace(sl, file=dataclasses.replace(sl.file, compression="zstd"))
    assert reader.spans_of(zst) == [zst]  # small compressed: one worker, whole
    monkeypatch.setattr(reader, "WHOLE_MAX", 100)
    assert reader.spans_of(zst) is None


def test_spans_read_every_record_once_with_the_slices_lines(tmp_path, monkeypatch):
    """Ranges cut anywhere (mid-line) give the slice's records, bad ones named at their true line."""
    from packer.formats import iter_parts
    from packer.pipeline.engines import reader

    monkeypatch.setattr(reader, "RANGE_BYTES", 777)
    lines = [f'{{"text": "doc {i} {"w " * (i % 30)}"}}' if i % 7 else ("{bad" if i % 2 else '{"text": ""}')
             for i in range(600)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n\n\n")
    sl = plan_slices(discover([str(tmp_path)]).files, 1 << 20)[0][0]
    spans = reader.spans_of(sl)
    assert len(spans) > 20
    got = _records([p for i, s in enumerate(spans) for g in reader.read_span(s, _job(tmp_path), i == len(spans) - 1)
                    for p in g])
    want = _records(iter_parts(sl))
    assert got == want and any(r.__class__.__name__ == "Skip" and r.where.endswith(":8") for r in got)


def test_a_range_inside_a_long_line_reads_only_its_own_bytes(tmp_path, monkeypatch):
    """A line longer than many ranges is read once, by the range holding its first byte; each range
    inside it reads no further than its own end (it read the line's rest before: quadratic in the line)."""
    from packer.formats import iter_parts
    from packer.io import readahead
    from packer.pipeline.engines import reader

    monkeypatch.setattr(reader, "RANGE_BYTES", 1000)
    texts = ["short one", "L" * 50_000, "short two", "M" * 30_000, "last"]
    write_jsonl(tmp_path / "a.jsonl", texts)
    sl = plan_slices(discover([str(tmp_path)]).files, 1 << 20)[0][0]
    spans = reader.spans_of(sl)
    assert len(spans) > 80
    read: list[int] = []
    real = readahead.ReadAhead._read_direct

    def counted(self, b):
        n = real(self, b)
        read[-1] += n
        return n

    monkeypatch.setattr(readahead.ReadAhead, "_read_direct", counted)
    got = []
    for i, s in enumerate(spans):
        read.append(0)
        got += _records([p for g in reader.read_span(s, _job(tmp_path), i == len(spans) - 1) for p in g])
    assert [r.text for r in got] == texts == [r.text for r in _records(iter_parts(sl))]
    inside = [i for i, s in enumerate(spans) if 2_000 < s.start and s.end < 50_000]  # wholly inside the long line
    assert inside and all(read[i] <= spans[i].end - spans[i].start + 1 for i in inside)
    assert sum(read) < 3 * sl.end  # each byte about once (it was ~ line length / range bytes times)


def test_a_file_changed_since_found_is_counted_once_however_many_spans(tmp_path, monkeypatch):
    import dataclasses

    from packer.formats import Skip
    from packer.pipeline.engines import reader

    monkeypatch.setattr(reader, "RANGE_BYTES", 500)
    write_jsonl(tmp_path / "a.jsonl", ["y" * 50] * 100)
    sl = plan_slices(discover([str(tmp_path)]).files, 1 << 20)[0][0]
    sl = dataclasses.replace(sl, file=dataclasses.replace(sl.file, stamp=(1, sl.file.stamp[1])))  # "rewritten"
    spans = reader.spans_of(sl)
    recs = _records([p for i, s in enumerate(spans) for g in reader.read_span(s, _job(tmp_path), i == len(spans) - 1)
                     for p in g])
    assert sum(1 for r in recs if isinstance(r, Skip) and r.reason == "truncated") == 1
    assert sum(1 for r in recs if not isinstance(r, Skip)) == 100


_OPENS = """
import os, sys
from packer import build
from packer.io import readahead
real = readahead.ReadAhead.__init__
def init(self, path, *a, **k):
    with open(sys.argv[2], "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    real(self, path, *a, **k)
readahead.ReadAhead.__init__ = init
sys.modules["packer.pipeline.engines.reader"].RANGE_BYTES = 64 << 10
build(sys.argv[1], sys.argv[3], seq_len=128, workers=2, quiet=True)
print(os.getpid())
"""


def test_pool_workers_read_local_jsonl_themselves(tmp_path):
    """With a pool, no jsonl byte passes through the main process: the workers open the file. (In a child
    of its own: a thread an earlier test left in this process would make the pool start from a forkserver,
    which the patched reader does not reach.)"""
    import subprocess
    import sys

    from packer import build

    write_jsonl(tmp_path / "c.jsonl", [f"document {i} " + "word " * (i % 50) for i in range(20000)])
    opened = tmp_path / "opened"
    run = subprocess.run([sys.executable, "-c", _OPENS, str(tmp_path / "c.jsonl"), str(opened), str(tmp_path / "a")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    pids = opened.read_text().split()
    assert len(pids) >= 10 and run.stdout.strip() not in pids
    build(str(tmp_path / "c.jsonl"), str(tmp_path / "b"), seq_len=128, workers=1, quiet=True)
    for name in ("manifest.json", "shards/000000.arrow", "units/000000.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_file_that_shrank_after_discovery_is_counted_once_when_the_workers_read_it(tmp_path, monkeypatch):
    import sys

    from packer import build

    B = sys.modules["packer.pipeline.steps"]
    monkeypatch.setattr("packer.pipeline.engines.reader.RANGE_BYTES", 4096)
    write_jsonl(tmp_path / "a.jsonl", [f"record {k}" for k in range(4000)])
    real = B.discover

    def discover_then_cut(*a, **kw):
        found = real(*a, **kw)
        data = (tmp_path / "a.jsonl").read_bytes()
        (tmp_path / "a.jsonl").write_bytes(data[: len(data) // 4])
        return found

    monkeypatch.setattr(B, "discover", discover_then_cut)
    data = (tmp_path / "a.jsonl").read_bytes()
    got = {}
    for workers in (2, 1):  # 1: the reader thread reads it, as before spans
        (tmp_path / "a.jsonl").write_bytes(data)
        got[workers] = build(str(tmp_path / "a.jsonl"), str(tmp_path / f"out{workers}"), seq_len=64, workers=workers,
                             quiet=True).manifest["totals"]
    assert got[2] == got[1] and got[2]["skipped"]["truncated"] == 1 and got[2]["documents"] > 900
