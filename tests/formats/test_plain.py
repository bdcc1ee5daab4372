"""packer/formats/plain.py: --format text and --text-extensions read source code and extensionless files
(README, LICENSE, Makefile) as text, one document per file; a binary file is skipped and counted."""

from __future__ import annotations

import json

import pytest

from packer import build
from packer.errors import PackerError

from tests._cli import cli


def _tree(tmp_path):
    root = tmp_path / "code"
    root.mkdir()
    (root / "a.py").write_text("def f():\n    return 1\n")
    (root / "Makefile").write_text("all:\n\techo hi\n")
    (root / "LICENSE").write_text("MIT License\n")
    (root / "tool.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    return root


def test_format_text_reads_every_file_and_counts_a_binary_one(tmp_path):
    root = _tree(tmp_path)
    res = build([str(root)], str(tmp_path / "out"), seq_len=64, format="text", workers=1)
    t = res.manifest["totals"]
    assert t["documents"] == 3 and t["skipped"] == {"binary": 1} and t["ignored_files"] == 0
    assert t["skipped_examples"]["binary"] == [f"{root / 'tool.bin'}: a NUL byte at byte 7"]
    assert res.manifest["settings"]["format"] == "text" and "text_extensions" not in res.manifest["settings"]


def test_text_extensions_reads_those_endings_and_is_recorded(tmp_path):
    root = _tree(tmp_path)
    res = build([str(root)], str(tmp_path / "out"), seq_len=64, text_extensions=".PY,rs", workers=1)
    assert res.manifest["totals"]["documents"] == 1 and res.manifest["totals"]["ignored_files"] == 3
    assert res.manifest["settings"]["text_extensions"] == [".py", ".rs"] and "format" not in res.manifest["settings"]
    with pytest.raises(PackerError, match="--text-extensions takes file endings"):
        build([str(root)], str(tmp_path / "out2"), text_extensions=".py,,")


def test_a_build_without_them_records_neither_and_names_the_ignored_files(tmp_path):
    root = _tree(tmp_path)
    (root / "notes.txt").write_text("hello\n")
    r = cli("build", str(root), str(tmp_path / "out"), "--seq-len", "64", "--workers", "1")
    assert r.returncode == 0, r.stderr
    line, = [ln for ln in r.stderr.splitlines() if ln.startswith("note: ignored ")]
    assert line.startswith("note: ignored 4 files: unsupported type ((no extension) x2, .bin, .py), e.g. ")
    assert str(root / "LICENSE") in line and "--format text" in line and "--text-extensions .bin" in line
    settings = json.loads((tmp_path / "out" / "manifest.json").read_text())["settings"]
    assert "format" not in settings and "text_extensions" not in settings
    (root / "notes.txt").unlink()  # nothing left to read: the error names what was ignored, and the way to read it
    r = cli("build", str(root), str(tmp_path / "out2"))
    assert r.returncode == 2 and "ignored 4 files" in r.stderr and "--format text" in r.stderr


def test_show_source_finds_a_document_of_a_format_text_build(tmp_path):
    root = _tree(tmp_path)
    build([str(root)], str(tmp_path / "out"), seq_len=64, format="text", workers=1)
    r = cli("show", str(tmp_path / "out"), "0", "--source")
    assert r.returncode == 0, r.stderr
    assert f"{root / 'Makefile'}: byte 0" in r.stdout
