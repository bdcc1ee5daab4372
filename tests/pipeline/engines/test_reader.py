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


