"""packer/formats/base.py: what every reader shares: a file that changed while it was read is a counted
`truncated`, and a record over --max-record-mb a counted `too_long`."""

from __future__ import annotations

import os
import sys

import pytest

from packer import build
from packer.formats import discover, plan_slices, read_slice
from packer.formats.base import Document, Skip
from tests.formats.test_awkward_inputs import jl, run, skipped


# 2. A file that shrinks, grows or is rewritten while it is read: counted `truncated`, naming it.
@pytest.mark.parametrize("change", ["shrink", "grow", "rewrite"])
def test_file_changed_while_read_is_counted(tmp_path, change):
    p = tmp_path / "a.jsonl"
    p.write_bytes(jl(*({"text": f"record {k}"} for k in range(20000))))
    found = discover([str(p)])
    size = found.files[0].size
    data = p.read_bytes()
    if change == "shrink":
        p.write_bytes(data[: size // 4])
    elif change == "grow":
        p.write_bytes(data + jl({"text": "appended"}))
    else:
        p.write_bytes(data.replace(b"record 1", b"RECORD 1"))
        os.utime(p, ns=(os.stat(p).st_atime_ns, found.files[0].stamp[0] + 10**9))
    recs = [r for sl, _ in plan_slices(found.files, 1 << 16) for r in read_slice(sl)]
    trunc = [r for r in recs if isinstance(r, Skip) and r.reason == "truncated"]
    assert trunc and all(str(p) in t.where and "changed while it was read" in t.where for t in trunc)
    docs = sum(isinstance(r, Document) for r in recs)
    if change == "shrink":
        assert docs < 20000  # what was lost is not silent: a truncated skip says so


def test_build_counts_a_file_that_shrank_after_discovery(tmp_path, monkeypatch):
    B = sys.modules["packer.pipeline.steps"]  # the build's steps (``packer.build`` names the function)

    root = tmp_path / "in"
    root.mkdir()
    (root / "a.jsonl").write_bytes(jl(*({"text": f"record {k}"} for k in range(4000))))
    (root / "b.txt").write_bytes(b"a text file")
    real = B.discover

    def discover_then_cut(*a, **kw):
        found = real(*a, **kw)
        for name in ("a.jsonl", "b.txt"):
            data = (root / name).read_bytes()
            (root / name).write_bytes(data[: len(data) // 4])
        return found

    monkeypatch.setattr(B, "discover", discover_then_cut)
    res = build(str(root), str(tmp_path / "out"), seq_len=64, workers=1)
    t = res.manifest["totals"]
    assert t["skipped"].get("truncated") == 2, t["skipped"]
    ex = " ".join(t["skipped_examples"]["truncated"])
    assert "a.jsonl" in ex and "b.txt" in ex


def test_over_long_line_and_text_file_are_skipped_and_counted(tmp_path):
    long = {"text": "x" * (3 << 20)}
    texts, m = run(tmp_path, {"a.jsonl": jl({"text": "one"}, long, {"text": "three"}),
                              "big.txt": b"y" * (2 << 20)}, max_record_mb=1)
    assert texts == [b"one", b"three"]
    assert skipped(m) == {"too_long": 2}
    ex = m["totals"]["skipped_examples"]["too_long"]
    assert any(e.split(" ")[0].endswith("a.jsonl:2") for e in ex) and any("big.txt" in e for e in ex)

