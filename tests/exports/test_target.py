"""The destination: temp folder beside DEST, renamed into place with the completing file last."""

from __future__ import annotations

import os

import pytest

from packer.errors import PackerError
from packer.exports.target import MARK, Target, write_mark


def test_commit_moves_the_files_in_order_and_leaves_no_temp_folder(tmp_path):
    (tmp_path / "p.idx").write_text("old")  # an earlier export's marker goes first, then is replaced
    t = Target(str(tmp_path / "p"), ["p.bin", "p.idx"], overwrite=True)
    assert os.path.dirname(t.tmp) == str(tmp_path) and os.path.basename(t.tmp).startswith(".tmp-export-")
    for n in t.names:
        open(t.path(n), "w").write("new " + n)
    t.commit()
    assert sorted(os.listdir(tmp_path)) == ["p.bin", "p.idx"]
    assert (tmp_path / "p.idx").read_text() == "new p.idx"


def test_discard_removes_everything_written(tmp_path):
    t = Target(str(tmp_path / "d"), ["d"], overwrite=False)
    os.makedirs(t.path("d"))
    write_mark(t.path("d"), {"format": "olmo"})
    assert os.path.exists(os.path.join(t.path("d"), MARK))
    t.discard()
    assert os.listdir(tmp_path) == []


def test_a_missing_parent_or_a_present_dest_is_one_line(tmp_path):
    with pytest.raises(PackerError, match="does not exist"):
        Target(str(tmp_path / "no" / "d"), ["d"], overwrite=False)
    (tmp_path / "d").mkdir()
    with pytest.raises(PackerError, match="exists: pass --overwrite"):
        Target(str(tmp_path / "d"), ["d"], overwrite=False)
    Target(str(tmp_path / "d"), ["d"], overwrite=True).discard()  # an empty folder may be replaced
