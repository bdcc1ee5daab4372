"""Chunk tokens through files (packer/pipeline/spill.py): exact round trips, nothing left behind."""

import os
import subprocess
import sys

import numpy as np
import pytest

from packer import build
from packer.pipeline import spill
from packer.pipeline.plan import ChunkResult
from packer.formats import Skip


def _result(rng, dtype="uint32", mask=False, held=False) -> ChunkResult:
    lengths = rng.integers(1, 50, size=7).astype(np.int64)
    tokens = rng.integers(0, 2**16 if dtype == "uint16" else 2**31, size=int(lengths.sum())).astype(dtype)
    return ChunkResult(tokens, lengths, (Skip("empty", "a.jsonl:3"),), 123,
                       mask=rng.integers(0, 2, size=len(tokens)).astype(np.uint8) if mask else None,
                       held=_result(rng, dtype) if held else None)


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_put_take_round_trip_is_exact(tmp_path, dtype):
    rng = np.random.default_rng(0)
    res = _result(rng, dtype, mask=True, held=True)
    sent = spill.put(res, str(tmp_path / "0.0"))
    # What crosses between processes holds no array of tokens any more.
    assert isinstance(sent.tokens, spill.Spilled) and isinstance(sent.mask, spill.Spilled)
    assert isinstance(sent.held.tokens, spill.Spilled)
    assert len(sent.tokens) == len(res.tokens)
    back = spill.take(sent)
    np.testing.assert_array_equal(back.tokens, res.tokens)
    assert back.tokens.dtype == res.tokens.dtype
    assert type(back.tokens) is np.ndarray  # mapped, but not a np.memmap: its slicing runs Python per slice
    np.testing.assert_array_equal(back.mask, res.mask)
    np.testing.assert_array_equal(back.held.tokens, res.held.tokens)
    np.testing.assert_array_equal(back.lengths, res.lengths)
    assert back.skipped == res.skipped and back.nbytes == 123
    del back
    spill.remove(sent)
    assert os.listdir(tmp_path) == []
    spill.remove(sent)  # twice: no error


def test_empty_chunk_round_trip(tmp_path):
    res = ChunkResult(np.zeros(0, np.uint16), np.zeros(0, np.int64), (), 0)
    back = spill.take(spill.put(res, str(tmp_path / "e")))
    assert back.tokens.dtype == np.uint16 and len(back.tokens) == 0


def test_folder_is_removed_and_falls_back_without_room(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    big = spill.SpillFolder(1 << 62)  # no /dev/shm has that much room: the temporary folder
    assert os.path.dirname(big.path) == str(tmp_path)
    assert os.path.basename(big.path).startswith(f"{spill.PREFIX}{os.getpid()}-")
    big.remove()
    assert not os.path.exists(big.path)


def test_orphans_of_dead_builds_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_SPILL_DIR", str(tmp_path))
    code = ("import sys, time; from packer.pipeline import spill; f = spill.SpillFolder(1); "
            "print(f.path, flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        theirs = p.stdout.readline().strip()
        (tmp_path / os.path.basename(theirs) / "0.0.ids").write_bytes(b"x" * 10)
        unlocked = tmp_path / f"{spill.PREFIX}1-gone"  # a dead build's: its lock file is free
        unlocked.mkdir()
        (unlocked / spill.LOCK).write_bytes(b"")
        bare = tmp_path / f"{spill.PREFIX}2-making"  # no lock yet (being made): not ours to judge
        bare.mkdir()
        mine = spill.SpillFolder(1)
        assert os.path.isdir(theirs)  # its build runs: kept, whatever its pid says
        assert not unlocked.exists() and bare.exists()
        p.kill()  # SIGKILL: no clean-up of its own
        p.wait()
        again = spill.SpillFolder(1)
        assert not os.path.exists(theirs)
        assert os.path.isdir(mine.path)  # this process's own, still held, is kept
        mine.remove()
        again.remove()
    finally:
        p.kill()


def test_pool_build_leaves_no_spill_files_and_matches_one_worker(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(spill.shutil, "disk_usage", lambda p: type("U", (), {"free": 0})())  # force tmp
    corpus = tmp_path / "c.jsonl"
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "delta", "é", "日本", "\n"]
    with open(corpus, "w") as fh:
        for i in range(3000):
            fh.write('{"text": "%s"}\n' % " ".join(rng.choice(words[:-1], size=int(rng.integers(5, 400)))))
    real_take, took = spill.take, tmp_path / "took"

    def take(res):  # runs in the assembling worker (forked: it has this patch)
        with open(took, "a") as fh:
            fh.write(res.tokens.path + "\n")
        return real_take(res)

    monkeypatch.setattr(spill, "take", take)
    a = build(str(corpus), str(tmp_path / "a"), seq_len=128, workers=2, unit_mb=0.25, quiet=True)
    b = build(str(corpus), str(tmp_path / "b"), seq_len=128, workers=1, unit_mb=0.25, quiet=True)
    assert a.manifest["totals"] == b.manifest["totals"]
    sa = sorted(os.listdir(tmp_path / "a" / "shards"))
    assert len(sa) > 1
    for name in sa:
        assert (tmp_path / "a" / "shards" / name).read_bytes() == (tmp_path / "b" / "shards" / name).read_bytes()
    paths = took.read_text().split()
    assert len(paths) >= len(sa) and all(p.startswith(str(tmp_path / "tmp" / spill.PREFIX)) for p in paths)
    assert os.listdir(tmp_path / "tmp") == []  # the spill folder is gone with its files


def test_parts_round_trip_and_the_file_goes(tmp_path):
    from packer.formats import Part, discover, plan_slices

    src = tmp_path / "c.jsonl"
    src.write_text('{"text": "a"}\n{"text": "b"}\n')
    sl = plan_slices(discover([str(src)]).files, 1 << 20)[0][0]
    parts = [Part(sl, [b'{"text": "a"}\n', b'{"text": "b"}\n'], 0, 0, Skip("truncated", "c.jsonl:3"), 28)]
    sent = spill.put_parts(parts, str(tmp_path / "0.0.in"))
    assert os.path.getsize(sent.path) > 0
    assert sent.load() == parts
    assert not os.path.exists(sent.path)  # read once, by the worker that encodes it


def test_pool_workers_read_their_input_from_files(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(spill.shutil, "disk_usage", lambda p: type("U", (), {"free": 0})())
    # Text files: the reader thread reads them (jsonl on local disk the workers read themselves: test_reader.py).
    corpus = tmp_path / "c"
    corpus.mkdir()
    for i in range(400):
        (corpus / f"{i:03d}.txt").write_text("document %d %s" % (i, "word " * (i % 50) * 10))
    real_load, loaded = spill.SpilledParts.load, tmp_path / "loaded"

    def load(self):  # runs in the worker that encodes the chunk
        with open(loaded, "a") as fh:
            fh.write(f"{os.getpid()} {self.path}\n")
        return real_load(self)

    monkeypatch.setattr(spill.SpilledParts, "load", load)
    a = build(str(corpus), str(tmp_path / "a"), seq_len=128, workers=2, quiet=True)
    b = build(str(corpus), str(tmp_path / "b"), seq_len=128, workers=1, quiet=True)
    rows = [line.split() for line in loaded.read_text().splitlines()]
    assert len(rows) >= 2 and all(int(pid) != os.getpid() for pid, _ in rows)
    assert a.manifest["totals"] == b.manifest["totals"]
    assert os.listdir(tmp_path / "tmp") == []


def test_spill_dir_is_the_users_choice_and_a_bad_one_is_one_line(tmp_path, monkeypatch):
    from packer.errors import PackerError

    monkeypatch.setenv("PACKER_SPILL_DIR", str(tmp_path))
    f = spill.SpillFolder(1 << 62)  # however little room: the folder asked for
    assert os.path.dirname(f.path) == str(tmp_path)
    f.remove()
    monkeypatch.setenv("PACKER_SPILL_DIR", str(tmp_path / "missing"))
    with pytest.raises(PackerError, match="spill folder in .*missing.*PACKER_SPILL_DIR"):
        spill.SpillFolder(1)


def test_a_full_spill_folder_is_one_line(tmp_path, monkeypatch):
    from packer.errors import PackerError

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spill.os, "write", full)  # the file opens; writing into it finds the disk full
    with pytest.raises(PackerError, match="No space left on device.*PACKER_SPILL_DIR.*--resume"):
        spill.put_parts([], str(tmp_path / "x.in"))
    monkeypatch.undo()
    monkeypatch.setattr(spill.os, "open", full)
    with pytest.raises(PackerError, match="No space left on device.*PACKER_SPILL_DIR.*--resume"):
        spill.put_parts([], str(tmp_path / "y.in"))


def test_a_chunk_file_removed_under_the_build_is_one_line(tmp_path):
    from packer.errors import PackerError

    rng = np.random.default_rng(2)
    sent = spill.put(_result(rng), str(tmp_path / "0.0"))
    parts = spill.put_parts([], str(tmp_path / "0.0.in"))
    for p in tmp_path.iterdir():
        p.unlink()  # a /dev/shm cleaner, mid-build
    with pytest.raises(PackerError, match=r"chunk file .*0\.0\.ids cannot be read back .*--resume"):
        spill.take(sent)
    with pytest.raises(PackerError, match=r"chunk file .*0\.0\.in cannot be read back .*--resume"):
        parts.load()
