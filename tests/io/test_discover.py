"""packer/io/discover.py: finding the input files: only regular files are read, a bad name or a
symlink loop is one line."""

from __future__ import annotations

import json
import os

import pytest

from packer.errors import PackerError
from tests._cli import cli, one_line
from tests.formats.test_awkward_inputs import jl


# 8. Special files: only regular files are read; the rest is counted.
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_and_device_inputs_are_counted_not_read(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    os.mkfifo(root / "x.jsonl")
    os.symlink("/dev/zero", root / "zero.txt")
    (root / "ok.jsonl").write_bytes(jl({"text": "fine"}))
    out = str(tmp_path / "out")
    r = cli("build", str(root), out, "--seq-len", "64", "--workers", "1", timeout=60)
    assert r.returncode == 0, r.stderr
    t = json.load(open(os.path.join(out, "manifest.json")))["totals"]
    assert t["skipped"] == {"not_regular": 2} and t["documents"] == 1
    assert any("x.jsonl" in e for e in t["skipped_examples"]["not_regular"])


# 9. Tracebacks where one line belongs.
def test_file_symlink_loop_is_one_line(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    os.symlink("b.txt", root / "a.txt")
    os.symlink("a.txt", root / "b.txt")
    r = cli("build", str(root), str(tmp_path / "out"), timeout=60)
    assert r.returncode == 2
    one_line(r, "a.txt")


def test_file_name_not_utf8_is_one_line(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    try:
        open(os.path.join(os.fsencode(root), b"caf\xe9.txt"), "wb").write(b"text")
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    r = cli("build", str(root), str(tmp_path / "out"), timeout=60)
    assert r.returncode == 2
    one_line(r, "not valid UTF-8")



def _accepts(p: str) -> bool:
    return p.endswith((".jsonl", ".txt"))


def _unknown(p: str) -> PackerError:
    return PackerError(f"not an input: {p}")


def test_folders_are_walked_sorted_as_paths_skipping_dotfiles_and_counting_the_ignored(tmp_path):
    from packer.io.discover import find

    for name in ("b.jsonl", "a/z.txt", "a/sub/y.jsonl", "a.txt", ".hidden.jsonl", "a/notes.csv", ".git/x.jsonl"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * len(name))
    found = find([str(tmp_path)], _accepts, _unknown)
    rel = [os.path.relpath(p, tmp_path) for p, _ in found.files]
    assert rel == ["a/sub/y.jsonl", "a/z.txt", "a.txt", "b.jsonl"]
    assert [size for _, size in found.files] == [len(r) for r in rel]
    assert [os.path.relpath(p, tmp_path) for p in found.ignored] == ["a/notes.csv"]
    assert len(found.stamps) == len(found.files) and all(s[2] for s in found.stamps)  # a content stamp each


def test_a_path_given_twice_is_read_once_and_the_output_folder_never(tmp_path):
    from packer.io.discover import find

    (tmp_path / "a.jsonl").write_bytes(b"{}\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x.jsonl").write_bytes(b"{}\n")
    found = find([str(tmp_path), str(tmp_path / "a.jsonl")], _accepts, _unknown, exclude=str(tmp_path / "out"))
    assert [p for p, _ in found.files] == [str(tmp_path / "a.jsonl")]
    assert found.duplicates == (str(tmp_path / "a.jsonl"),)


def test_a_missing_input_a_broken_link_and_an_unknown_file_are_one_line(tmp_path):
    from packer.io.discover import find

    (tmp_path / "notes.csv").write_text("x")
    os.symlink("nowhere", tmp_path / "dangling.jsonl")
    with pytest.raises(PackerError, match="not an input: .*notes.csv"):
        find([str(tmp_path / "notes.csv")], _accepts, _unknown)
    with pytest.raises(PackerError, match="broken symlink"):
        find([str(tmp_path / "dangling.jsonl")], _accepts, _unknown)
    with pytest.raises(PackerError):
        find([str(tmp_path / "none.jsonl")], _accepts, _unknown)


def test_check_name_refuses_a_name_that_is_not_utf8():
    from packer.io.discover import check_name

    check_name("café.jsonl")
    with pytest.raises(PackerError, match="not valid UTF-8"):
        check_name(os.fsdecode(b"caf\xe9.jsonl"))
