"""The fast paths give the same answers as the plain ones: reading split into
parts, parallel read-ahead, flat encoding, chunk sizes, the unit window."""

from __future__ import annotations

import importlib
import os
import random

import numpy as np
import pytest

from packer import BuildConfig, build, formats as sources
from packer.io import ReadAhead
from packer.formats import discover, iter_parts, parse_part, plan_slices, read_slice
from packer.tokenize import Encoder, resolve_tokenizer

from tests._services import folder_files

from tests.conftest import SAMPLE

build_module = importlib.import_module("packer.pipeline.engines.base")  # where every engine cuts chunks


def _records(sl, part_bytes):
    out = []
    for part in iter_parts(sl, "text", part_bytes=part_bytes):
        out.extend(parse_part(part, ("text",)))
    return out


@pytest.mark.parametrize("target", [1 << 30, 50_000, 7_000])
def test_parts_of_any_size_give_the_same_records(target):
    """Every record (texts and skips, with where) comes out once, in order,
    however a slice is cut into parts and however files are cut into slices."""
    files = discover([SAMPLE]).files
    whole = [r for sl, _ in plan_slices(files, 1 << 30) for r in read_slice(sl)]
    for part_bytes in (1, 999, 1 << 20):
        got = [r for sl, _ in plan_slices(files, target) for r in _records(sl, part_bytes)]
        assert got == whole


def test_read_ahead_returns_the_file_bytes(tmp_path):
    rng = random.Random(3)
    data = rng.randbytes(100_000)  # (300 KB before issue 54: a third of the 1-byte reads, the same cases)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    for _ in range(25):
        start = rng.randrange(len(data))
        limit = rng.choice([None, rng.randrange(1, len(data))])
        ra = ReadAhead(str(path), start, limit, block=rng.choice([61, 777, 4096, 1 << 20]), depth=rng.choice([1, 3, 8]))
        got = bytearray()
        buf = bytearray(rng.choice([1, 500, 65536]))
        while n := ra.readinto(buf):
            got += buf[:n]
        ra.close()
        assert bytes(got) == data[start:]


def test_read_ahead_counts_bytes(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100_000)
    seen = []
    ra = ReadAhead(str(path), 10, None, on_bytes=seen.append, block=4096)
    while ra.read(8192):
        pass
    ra.close()
    assert sum(seen) == 100_000 - 10


def test_read_ahead_blocks_grow_then_taper_to_the_end(tmp_path):
    """Big blocks mid-file (few round trips), small ones at its end (a slow link's last block
    must not keep the parser waiting): no block over max(TAPER_MIN, 1/8 of what was left)."""
    from packer.io.readahead import READ_BLOCK, TAPER_MIN

    path = tmp_path / "f.bin"
    total = 40 << 20
    with open(path, "wb") as f:
        f.truncate(total)
    sizes = []
    ra = ReadAhead(str(path), 0, None, on_bytes=sizes.append)
    while ra.read(1 << 20):
        pass
    ra.close()
    assert sum(sizes) == total
    assert max(sizes) == READ_BLOCK
    left = total
    for n in sizes:
        assert n <= max(TAPER_MIN, left // 8)
        left -= n
    assert sizes[-1] <= TAPER_MIN


@pytest.mark.parametrize("spec", ["bytes", "gpt2"])
@pytest.mark.parametrize("eos", [True, False])
def test_encode_flat_is_each_text_encoded_alone(spec, eos, request):
    tok = request.getfixturevalue("gpt2_path") if spec == "gpt2" else None
    info = resolve_tokenizer(tok, eos)
    if hasattr(info, "backend") and info.kind == "hf":
        from dataclasses import replace

        info = replace(info, backend="hf")
    enc = Encoder(info)
    texts = ["hello world", "", "é ü \U0001f600 tabs\tand\nnewlines", "x" * 5000, " leading space"]
    ids, lengths = enc.encode_flat(texts)
    assert ids.dtype == np.uint32 and lengths.dtype == np.int64
    assert len(lengths) == len(texts) and int(lengths.sum()) == len(ids)
    pos = 0
    for t, n in zip(texts, lengths):
        alone, _ = enc.encode_flat([t])
        assert np.array_equal(ids[pos : pos + n], alone)
        if eos:
            assert ids[pos + n - 1] == info.eos_id
        pos += n
    assert [a.tolist() for a in enc.encode_batch(texts)] == [ids[s : s + n].tolist() for s, n in
                                                             zip(np.cumsum(lengths) - lengths, lengths)]


def test_chunk_size_does_not_change_the_output(tmp_path, monkeypatch):
    """Chunks are the grain of parallelism only: tiny chunks, many units and
    2 workers give the same bytes as one worker with the default chunks."""
    cfg = dict(inputs=(SAMPLE,), seq_len=128, unit_bytes=300_000)
    build(BuildConfig.of(out=str(tmp_path / "a"), workers=1, **cfg))
    monkeypatch.setattr(build_module, "PART_BYTES", 3_000)
    monkeypatch.setattr(sources, "PART_BYTES", 1_000)
    build(BuildConfig.of(out=str(tmp_path / "b"), workers=1, **cfg))
    build(BuildConfig.of(out=str(tmp_path / "c"), workers=2, **cfg))
    a, b, c = (folder_files(tmp_path / x) for x in "abc")
    assert a == b == c
    assert sum(k.startswith("shards/") for k in a) > 3


def test_whole_file_read_matches_the_file_whatever_discovery_saw(tmp_path):
    """Text files are read with one read of the discovered size + 1 byte; a file that
    changed size since discovery (grew, shrank, emptied) still comes back whole."""
    from packer.io import storage_for

    path = tmp_path / "f.txt"
    data = b"".join(b"line %d\n" % i for i in range(5000))
    path.write_bytes(data)
    for seen in (len(data), 0, 100, len(data) - 1, len(data) + 1, 10 * len(data)):
        assert storage_for(str(path)).read(size_hint=seen) == data
    path.write_bytes(b"")
    assert storage_for(str(path)).read(size_hint=0) == b""
    assert storage_for(str(path)).read(size_hint=50) == b""


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies only")
def test_reader_threads_run_as_batch_and_leave_the_caller_alone(tmp_path, monkeypatch):
    """Whole-file prefetch threads and read-ahead threads do not preempt the tokenizer
    (SCHED_BATCH); the thread that drives them keeps its own policy."""
    import threading

    from packer.formats import iter_parts_many

    allowed = []

    def probe():
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            allowed.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    if not allowed:
        pytest.skip("this system does not let a thread change its scheduling policy")
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.jsonl").write_text('{"text": "beta"}\n')
    policies = []
    real_read = sources.text.read_whole
    monkeypatch.setattr(sources.text, "read_whole",
                        lambda sl, on_bytes=None, *rest: (policies.append(os.sched_getscheduler(0)), real_read(sl, on_bytes, *rest))[1])
    before = os.sched_getscheduler(0)
    slices = [(sl.file.path, sl) for sl, _ in plan_slices(discover([str(tmp_path)]).files, 1 << 30)]
    texts = [t for _, p in iter_parts_many(slices) for t in parse_part(p, ("text",))]
    assert sorted(t.text for t in texts) == ["alpha\n", "beta"]
    assert policies == [os.SCHED_BATCH]
    ra = ReadAhead(str(tmp_path / "b.jsonl"))
    assert ra._pool.submit(os.sched_getscheduler, 0).result() == os.SCHED_BATCH
    ra.close()
    assert os.sched_getscheduler(0) == before


def test_presized_ipc_file_is_the_plain_writers_bytes():
    """shards.table_bytes lays the file out into an exactly sized buffer; the bytes are
    those of pyarrow's plain IPC file writer, batch for batch, and the file reads back."""
    import pyarrow as pa

    from packer import shards as S

    rng = np.random.default_rng(5)
    seq_len, rows = 64, 2500  # more rows than one 1024-row batch
    lengths = rng.integers(1, seq_len + 1, size=rows)
    tokens = rng.integers(0, 50_000, size=rows * seq_len).astype(np.uint16)
    row = np.arange(rows)
    table = S.shard_table(tokens, seq_len, row, lengths, row, np.zeros(rows, np.int64), rows)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        for batch in table.to_batches(max_chunksize=1024):
            w.write_batch(batch)
    want = sink.getvalue().to_pybytes()
    got = S.table_bytes(table)
    assert bytes(got) == want and len(got) == len(want)
    assert S.checksum(got) == S.checksum(want)
    back = pa.ipc.open_file(pa.BufferReader(got)).read_all()
    assert back.equals(table) and back.to_batches()[0].num_rows == 1024
