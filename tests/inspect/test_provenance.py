"""``packer show OUT ROW --source`` / ``packer.source_of``: every document traced back to its input line, row or file."""

from __future__ import annotations

import functools
import json
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import packer
from packer.errors import PackerError
from packer.inspect import read_row, unit_sources
from packer.io import open_stream
from tests.conftest import SAMPLE, invoke, read_documents

EOS = 256  # the byte tokenizer's end-of-document id


@functools.lru_cache(maxsize=None)
def _lines(path: str) -> list[bytes]:
    comp = {".gz": "gzip", ".zst": "zstd"}.get(os.path.splitext(path)[1])
    with open_stream(path, comp) as s:
        return s.read().split(b"\n")


def text_at(file: str, kind: str, at: int) -> str:
    """The text at a location, read straight from the file (not through packer's readers)."""
    if kind == "line":
        line = _lines(file)[at - 1]
        return json.loads(line.decode("utf-8-sig") if at == 1 else line)["text"]
    if kind == "row":
        return pq.read_table(file, columns=["text"]).column("text")[at].as_py()
    assert kind == "byte"
    with open(file, "rb") as f:
        return f.read()[at:].decode("utf-8-sig")


def check_every_document(out: str) -> int:
    """Each document of ``out``, as the shards hold it, is the text at the place provenance names."""
    docs, m = read_documents(out)
    seen, kinds = 0, set()
    for e in m["shards"]:
        _, where = unit_sources(out, e["unit"])
        assert len(where) == e["documents"]
        for file, kind, at in where:
            want = list(text_at(file, kind, at).encode()) + [EOS]
            assert docs[seen].tolist() == want, (e["unit"], file, kind, at)
            kinds.add((os.path.splitext(file)[1], kind))
            seen += 1
    assert seen == len(docs)
    return len(kinds)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """sample_data (jsonl split mid-file, .gz, .zst, parquet row groups, txt with skipped records) with --holdout."""
    root = tmp_path_factory.mktemp("prov")
    out = str(root / "out")
    packer.build([SAMPLE], out, seq_len=256, workers=1, unit_mb=1, holdout=0.1, quiet=True)
    return root, out


def test_every_document_points_at_its_line_row_or_file(sample_build):
    out = sample_build  # sample_data, seq_len 256, 1 MB units (tests/conftest.py): read only
    # .jsonl/.gz/.zst by line, .parquet by row, .txt by byte: all of them met
    assert check_every_document(out) == 5


def test_holdout_main_and_held_documents(built):
    _, out = built
    assert check_every_document(out) == 5
    check_every_document(os.path.join(out, "holdout"))


def test_source_of_a_row_names_each_piece(built):
    _, out = built
    rows = read_documents(out)[1]["totals"]["rows"]
    for row in (0, rows // 2, rows - 1):
        view = read_row(out, row)
        got = packer.source_of(out, row)
        assert [(s.piece, s.unit, s.doc) for s in got] == [(i, p.unit, p.doc) for i, p in enumerate(view.pieces)]
        for s, p in zip(got, view.pieces):
            want = np.frombuffer(text_at(s.file, s.kind, s.at).encode(), np.uint8).tolist() + [EOS]
            assert p.ids.tolist() == want[p.offset:p.offset + len(p.ids)]
            assert s.build == out


def test_repack_gives_the_same_provenance(built):
    root, out = built
    out2 = str(root / "repacked")
    packer.repack(out, out2, seq_len=512, quiet=True)
    check_every_document(out2)
    check_every_document(os.path.join(out2, "holdout"))
    m2 = json.load(open(os.path.join(out2, "manifest.json")))
    for e in m2["shards"]:  # unit by unit, the same list as the source build's unit
        assert unit_sources(out2, e["unit"]) == unit_sources(out, e["unit"])
    assert packer.source_of(out2, 0)[0].build == out


def test_cli_show_source(built):
    _, out = built
    r = invoke("show", out, "1", "--source")
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("[source: ")]
    assert lines == [f"[source: {s}]" for s in packer.source_of(out, 1)]


def test_moved_input_is_one_line(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(os.path.join(SAMPLE, "corpus.jsonl.gz"), src / "a.jsonl.gz")
    shutil.copy(os.path.join(SAMPLE, "txt", "doc001.txt"), src / "b.txt")
    out = str(tmp_path / "out")
    packer.build([str(src)], out, seq_len=256, workers=1, quiet=True)
    assert packer.source_of(out, 0)
    os.rename(src / "a.jsonl.gz", src / "moved.jsonl.gz")
    with pytest.raises(PackerError, match=r"input .*a\.jsonl\.gz changed or is gone since the build; provenance "
                                          r"needs the inputs"):
        packer.source_of(out, 0)
    r = invoke("show", out, "0", "--source")
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1].endswith("provenance needs the inputs")
    # the same name, other content: the unit's documents no longer add up
    with open(src / "a.jsonl.gz", "wb") as f:
        f.write(open(src / "moved.jsonl.gz", "rb").read()[:100])
    with pytest.raises(PackerError, match="changed or is gone|documents now"):
        packer.source_of(out, 0)


def test_chat_build_is_refused_in_one_line(built, tmp_path):
    _, out = built
    copy = str(tmp_path / "chat")
    shutil.copytree(out, copy)
    path = os.path.join(copy, "manifest.json")
    m = json.load(open(path))
    m["settings"]["chat"] = {"fields": ["messages", "prompt", "completion"]}  # as a chat build records it
    json.dump(m, open(path, "w"))
    with pytest.raises(PackerError, match="--source does not support chat builds"):
        packer.source_of(copy, 0)
