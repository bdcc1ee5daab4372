"""packer/io/atomic.py: a file is written whole or not at all, with the mode the umask gives."""

from __future__ import annotations

import os
import stat

import pytest

from packer import build
from tests._cli import corpus  # noqa: F401 - a fixture


# 13. Files honour the umask, as every peer's do.
@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, corpus, mask, mode):
    out = str(tmp_path / "out")
    old = os.umask(mask)  # the umask of the moment, as a shell's would be for a command
    try:
        build(corpus, out, seq_len=128, unit_mb=0.02, workers=1)
    finally:
        os.umask(old)
    files = [os.path.join(top, n) for top, _, names in os.walk(out) for n in names]
    assert len(files) >= 4
    assert {stat.S_IMODE(os.stat(f).st_mode) for f in files} == {mode}



def test_a_write_is_whole_and_leaves_no_temp_file(tmp_path):
    from packer.io.atomic import atomic_write, json_bytes, write_json

    p = str(tmp_path / "a.json")
    atomic_write(p, b"first")
    write_json(p, {"b": 1, "a": [1, 2]})
    assert open(p, "rb").read() == json_bytes({"b": 1, "a": [1, 2]}) == b'{\n "b": 1,\n "a": [\n  1,\n  2\n ]\n}\n'
    assert os.listdir(tmp_path) == ["a.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    from packer.errors import PackerError
    from packer.io import atomic

    p = str(tmp_path / "a.json")
    atomic.atomic_write(p, b"old")

    def full(*a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", full)
    with pytest.raises(PackerError, match=r"cannot write .*a\.json: No space left on device; nothing partial was kept"):
        atomic.atomic_write(p, b"new")
    assert open(p, "rb").read() == b"old" and os.listdir(tmp_path) == ["a.json"]


def test_an_interrupt_mid_write_leaves_no_temp_file_and_is_not_turned_into_a_packer_error(tmp_path, monkeypatch):
    from packer.io import atomic

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.atomic_write(str(tmp_path / "a.json"), b"x")
    assert os.listdir(tmp_path) == []
