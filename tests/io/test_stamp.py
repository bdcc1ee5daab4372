"""Input stamps (packer/io/stamp.py): what discovery records of each input so that ``--resume``
sees an edit made between a kill and the resume, and what it cannot see."""

from __future__ import annotations

import os
import shutil

import pytest

from packer import build
from packer.errors import PackerError
from packer.formats import discover
from packer.io import stamp as ST
from packer.io.discover import find
from packer.io.lock import LOCK_NAME

from tests._cli import ARGS, cli, one_line
from tests.conftest import invoke as run_cli


def _stamps(folder):
    found = find([str(folder)], lambda p: True, ValueError)
    return {p: st for (p, _), st in zip(found.files, found.stamps)}


def _edit_in_place(path, offset: int, data: bytes) -> None:
    """Overwrite bytes at ``offset`` (same size, same inode), then put the modification time back."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_a_same_size_edit_with_its_time_put_back_changes_the_stamp(tmp_path):
    small = tmp_path / "a.jsonl"
    small.write_bytes(b'{"text": "hello world"}\n' * 1000)
    before = _stamps(tmp_path)[str(small)]
    assert len(before) == 3 and before[2]
    _edit_in_place(small, 12_000, b"J")  # the middle of a file hashed whole
    after = _stamps(tmp_path)[str(small)]
    assert after[:2] == before[:2] and after[2] != before[2]


@pytest.mark.parametrize("where", ["head", "middle", "tail"])
def test_a_large_file_is_stamped_from_its_head_middle_and_tail(tmp_path, where):
    big = tmp_path / "big.jsonl"
    size = ST.WHOLE_BYTES * 3 + 12345
    big.write_bytes(b"x" * size)
    before = _stamps(tmp_path)[str(big)][2]
    offset = {"head": 10, "middle": size // 2, "tail": size - 10}[where]
    _edit_in_place(big, offset, b"y")
    assert _stamps(tmp_path)[str(big)][2] != before


def test_what_the_stamp_cannot_see_is_as_documented(tmp_path):
    """An edit of a large file outside the three blocks, size, time and inode kept: not seen (docs/reliability.md)."""
    big = tmp_path / "big.jsonl"
    size = ST.WHOLE_BYTES * 3
    big.write_bytes(b"x" * size)
    before = _stamps(tmp_path)[str(big)]
    _edit_in_place(big, ST.BLOCK * 2, b"y")  # after the head block, before the middle one
    assert _stamps(tmp_path)[str(big)] == before


def test_the_content_digest_is_the_same_for_a_copy_of_the_corpus(tmp_path):
    a, b = tmp_path / "a" / "in", tmp_path / "b" / "in"
    a.mkdir(parents=True)
    for i in range(3):
        (a / f"{i}.jsonl").write_bytes(b'{"text": "doc %d"}\n' % i * 50)
    shutil.copytree(a, b)  # other inodes and times, the same bytes
    os.chdir(tmp_path / "a")
    fa = discover(["in"]).files
    os.chdir(tmp_path / "b")
    fb = discover(["in"]).files
    assert [f.stamp[:2] for f in fa] != [f.stamp[:2] for f in fb]
    assert ST.digest(fa, content_only=True) == ST.digest(fb, content_only=True)
    assert ST.digest(fa) != ST.digest(fb)
    (b / "1.jsonl").write_bytes(b'{"text": "DOC 1"}\n' * 50)
    assert ST.digest(discover(["in"]).files, content_only=True) != ST.digest(fa, content_only=True)


def test_an_unreadable_or_special_file_has_an_empty_content_stamp(tmp_path):
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    assert ST.file_content(str(fifo), 0) == ""  # opened without blocking; never read
    assert ST.file_content(str(tmp_path / "missing"), 10) == ""


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    for i in range(4):
        (root / f"{i}.jsonl").write_bytes(b"".join(b'{"text": "doc %d-%d %s"}\n' % (i, k, b"words " * (k % 17))
                                                   for k in range(300)))
    return str(root)


def _killed_build(corpus, out):
    from tests.conftest import packer_cli

    r = packer_cli("build", corpus, out, "--seq-len", "128", "--unit-mb", "0.02", "--workers", "1", "-q",
                   env={"PACKER_FAULT": "write", "PACKER_FAULT_UNIT": "1"})
    assert r.returncode != 0 and not os.path.exists(os.path.join(out, "manifest.json"))


# The content part of the stamp is compared on resume: through the lock's record (plan.input_stamp),
# and through build.json's "inputs" when the lock file is gone (a copied OUT).
def test_same_size_edit_with_time_and_inode_put_back_is_refused_on_resume(tmp_path, corpus):
    out = str(tmp_path / "out")
    _killed_build(corpus, out)
    _edit_in_place(os.path.join(corpus, "3.jsonl"), 5, b"D")
    with pytest.raises(PackerError, match="input files changed"):
        build(corpus, out, seq_len=128, unit_mb=0.02, workers=1, resume=True)



def test_resume_of_an_out_copied_without_its_lock_still_sees_an_edit(tmp_path, corpus):
    out = str(tmp_path / "out")
    _killed_build(corpus, out)
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns(".*"))
    assert not os.path.exists(os.path.join(copy, LOCK_NAME))
    p = os.path.join(corpus, "3.jsonl")
    data = open(p, "rb").read()
    with open(p, "wb") as f:
        f.write(data.replace(b"doc 3-", b"DOC 3-"))
    with pytest.raises(PackerError, match="input files changed"):
        build(corpus, copy, seq_len=128, unit_mb=0.02, workers=1, resume=True)


# 1. A same-size edit between a kill and --resume is refused.
def test_same_size_edit_between_kill_and_resume_is_refused(tmp_path, corpus):
    out = str(tmp_path / "out")
    r = cli("build", corpus, out, *ARGS, env={"PACKER_FAULT": "write", "PACKER_FAULT_UNIT": "1"})
    assert r.returncode != 0 and not os.path.exists(os.path.join(out, "manifest.json"))
    assert os.path.exists(os.path.join(out, LOCK_NAME)), "a killed build leaves its input stamps"
    p = os.path.join(corpus, "3.jsonl")
    data = open(p, "rb").read()
    edited = data.replace(b"doc 3-", b"DOC 3-")
    assert len(edited) == len(data) and edited != data
    st = os.stat(p)
    with open(p, "wb") as f:
        f.write(edited)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # whatever the clock's granularity
    r = cli("build", corpus, out, *ARGS, "--resume")
    assert r.returncode == 2
    one_line(r, "input files changed", out)
    # Put back as it was (content and time): the resume goes on and finishes.
    with open(p, "wb") as f:
        f.write(data)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    build(corpus, out, seq_len=128, unit_mb=0.02, workers=1, resume=True)
    assert not os.path.exists(os.path.join(out, LOCK_NAME)), "a finished build folder holds only the build"
    assert run_cli("stats", out).exit_code == 0

