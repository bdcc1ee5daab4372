"""A build never writes into another build (packer/io/lock.py check_nesting): not into a folder
inside the OUT of a build running now, not into another build's holdout (running or finished), not
into a folder whose holdout a running build writes. Each refusal names the build."""

from __future__ import annotations

import os

import pytest

from packer import build
from packer import shards as S
from packer.errors import PackerError
from packer.io import lock as L
from packer.io.lock import OutLock
from packer.io.lock import LOCK_NAME
from packer.pipeline.unit import HOLDOUT_DIR

from tests._cli import ARGS, cli, one_line

OPTS = dict(seq_len=128, unit_mb=0.02, workers=1)


def test_the_names_io_knows_are_the_pipelines():
    assert (L.BUILD_MARK, L.HOLDOUT) == (S.BUILD_JSON, HOLDOUT_DIR)


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    for i in range(3):
        (root / f"{i}.jsonl").write_text("".join(f'{{"text": "doc {i}-{k} {"w " * (k % 13)}"}}\n' for k in range(200)))
    return str(root)


def _files(folder) -> dict:
    out = {}
    for top, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(top, n)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


@pytest.fixture
def held_build(tmp_path, corpus):
    """A finished build with a holdout, its folder locked as a running build holds it."""
    out = str(tmp_path / "a")
    build(corpus, out, holdout=0.2, **OPTS)
    lock = OutLock(out).acquire()
    lock.record("x")
    yield out
    lock.release(finished=False)


def test_a_build_into_a_running_builds_holdout_is_refused_naming_it(held_build, corpus):
    held = os.path.join(held_build, HOLDOUT_DIR)
    before = _files(held)
    assert "manifest.json" in before
    for where in (held, os.path.join(held_build, "x", "y")):
        with pytest.raises(PackerError, match=rf"inside {held_build}, the output of a packer build running now "
                                              rf"\(pid {os.getpid()} on "):
            build(corpus, where, overwrite=True, **{**OPTS, "seq_len": 64})
    assert _files(held) == before, "the running build's holdout is untouched"
    assert not os.path.exists(os.path.join(held_build, "x"))


def test_a_finished_builds_holdout_is_never_rebuilt_from_outside(tmp_path, corpus):
    out = str(tmp_path / "a")
    build(corpus, out, holdout=0.2, **OPTS)
    held = os.path.join(out, HOLDOUT_DIR)
    before = _files(held)
    for opt in ("overwrite", "resume"):
        with pytest.raises(PackerError, match=rf"{held} is the holdout split of the packer build in {out}"):
            build(corpus, held, **{opt: True}, **OPTS)
    assert _files(held) == before
    build(corpus, out, overwrite=True, **{**OPTS, "seq_len": 64})  # the build itself replaces it, as always
    assert _files(held) != before


def test_a_build_around_a_running_build_is_refused_naming_it(tmp_path, corpus):
    out = str(tmp_path / "b")
    build(corpus, out, **OPTS)
    inner = os.path.join(out, HOLDOUT_DIR)
    os.makedirs(inner)
    lock = OutLock(inner).acquire()  # a build running into b/holdout
    lock.record("x")
    try:
        with pytest.raises(PackerError, match=rf"holds {inner}, the output of a packer build running now \(pid "):
            build(corpus, out, overwrite=True, **OPTS)
        assert os.path.isdir(inner)
    finally:
        lock.release(finished=False)
    build(corpus, out, overwrite=True, **OPTS)  # once it is gone


def test_a_sibling_of_a_running_build_is_not_refused(held_build, corpus, tmp_path):
    r = build(corpus, str(tmp_path / "a-sibling"), **OPTS)
    assert r.units_run > 0


# 3. An exclusive lock on OUT: a second build is refused, naming the holder.
def test_second_build_into_a_locked_folder_is_refused(tmp_path, corpus):
    out = str(tmp_path / "out")
    build(corpus, out, seq_len=128, unit_mb=0.02, workers=1)
    assert not os.path.exists(os.path.join(out, LOCK_NAME))
    before = {n: open(os.path.join(out, n), "rb").read() for n in ("manifest.json", "build.json")}
    held = OutLock(out).acquire()  # as a running build holds it
    held.record("x")
    try:
        r = cli("build", corpus, out, "--unit-mb", "0.02", "--workers", "1", "-q", "--overwrite", "--seq-len", "64")
        assert r.returncode == 2
        line = one_line(r, "in use by another packer build", f"pid {os.getpid()}", "started")
        assert os.uname().nodename in line
        after = {n: open(os.path.join(out, n), "rb").read() for n in before}
        assert after == before, "the refused build touched nothing"
    finally:
        held.release(finished=False)
    build(corpus, out, seq_len=64, unit_mb=0.02, workers=1, overwrite=True)


def test_a_refused_build_leaves_no_lock_file_in_a_foreign_folder(tmp_path, corpus):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = cli("build", corpus, str(out), *ARGS)
    assert r.returncode == 2
    assert sorted(os.listdir(out)) == ["notes.txt"]

