"""The awkward-input matrix: each case's expected outcome, written down and checked.

Every case ends in one of two ways: a clear one-line error (exit code 2 from the
CLI, ``PackerError`` from the API), or a build whose manifest counts what was
skipped, by reason, while every other document arrives intact. The table in
docs/reliability.md lists the same cases.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from packer import BuildConfig, build
from packer.errors import PackerError
from packer.formats import discover
from packer.io.discover import _mode_readable

from tests.conftest import read_documents
from tests.formats.helpers import jl, run, skipped  # (imported from here by other test files too)


# 1-2: invalid UTF-8 is skipped whole and counted (policy: never repaired).
def test_invalid_utf8_jsonl_line_is_skipped_and_counted(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": jl({"text": "ok"}, b'{"text": "caf\xe9"}', {"text": "after"})})
    assert texts == [b"ok", b"after"]
    assert skipped(m) == {"invalid_utf8": 1}
    assert m["totals"]["skipped_examples"]["invalid_utf8"][0].endswith("a.jsonl:2")


def test_bom_at_start_of_jsonl_is_dropped(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": b"\xef\xbb\xbf" + jl({"text": "one"}, {"text": "two"})})
    assert texts == [b"one", b"two"] and skipped(m) == {}


# 5: CRLF line endings: jsonl lines parse; CRs inside text are kept exactly.
def test_crlf(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": b'{"text": "x"}\r\n{"text": "y\\r\\nz"}\r\n', "b.txt": b"l1\r\nl2\r\n"})
    assert texts == [b"x", b"y\r\nz", b"l1\r\nl2\r\n"]


# 6: NUL bytes are valid UTF-8: kept as text.
def test_nul_bytes_are_text(tmp_path):
    texts, m = run(tmp_path, {"a.txt": b"a\x00b", "b.jsonl": jl({"text": "c\u0000d"})})
    assert texts == [b"a\x00b", b"c\x00d"]


def test_empty_jsonl_file_holds_no_records(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": b"", "b.jsonl": b"\n\n", "c.txt": b"x"})
    assert texts == [b"x"] and skipped(m) == {}


# 9-10: empty text is skipped; whitespace-only text is text.
def test_empty_and_whitespace_text(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": jl({"text": ""}, {"text": "  \n\t"}, {"text": " x "})})
    assert texts == [b"  \n\t", b" x "]
    assert skipped(m) == {"empty": 1}


# 11: malformed JSON.
def test_malformed_json(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": jl({"text": "a"}, b'{"text": "no end', b"[1, 2", {"text": "b"})})
    assert texts == [b"a", b"b"] and skipped(m) == {"malformed_json": 2}


# 12-13: missing field; non-string values (number, list, object, null); a line that is not an object.
def test_missing_and_non_string_fields(tmp_path):
    texts, m = run(
        tmp_path,
        {"a.jsonl": jl({"body": "x"}, {"text": 1}, {"text": ["a"]}, {"text": {"t": "a"}}, {"text": None}, "just a string", {"text": "ok"})},
    )
    assert texts == [b"ok"]
    assert skipped(m) == {"missing_field": 2, "not_string": 4}


# 14: nested field path.
def test_nested_text_field(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": jl({"meta": {"body": "deep"}}, {"meta": {}}, {"meta": "flat"})}, text_field="meta.body")
    assert texts == [b"deep"] and skipped(m) == {"missing_field": 2}


# 15: a single very long line (200 MB of text in one record).
@pytest.mark.slow
def test_single_200mb_line(tmp_path):
    big = "0123456789abcdef" * (200 * (1 << 20) // 16)
    root = tmp_path / "in"
    root.mkdir()
    with open(root / "a.jsonl", "w") as f:
        f.write('{"text": "')
        f.write(big)
        f.write('"}\n{"text": "tail"}\n')
    del big
    out = str(tmp_path / "out")
    build(BuildConfig.of(inputs=(str(root),), out=out, seq_len=8192, workers=1))
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert m["totals"]["documents"] == 2
    assert m["totals"]["tokens"] == 200 * (1 << 20) + 1 + 4 + 1
    assert m["totals"]["documents_split"] == 1


# 16-17: truncated archives keep what came before the break and count the break.
@pytest.mark.parametrize("ext", ["gz", "zst"])
def test_truncated_archives(tmp_path, ext):
    raw = jl(*({"text": f"record {i} " * 30} for i in range(2000)))
    blob = gzip.compress(raw) if ext == "gz" else zstandard.ZstdCompressor().compress(raw)
    texts, m = run(tmp_path, {f"a.jsonl.{ext}": blob[: len(blob) * 2 // 3], "b.txt": b"next file"})
    assert skipped(m) == {"truncated": 1}
    assert 0 < len(texts) - 1 < 2000 and texts[-1] == b"next file"
    assert texts[:-1] == [f"record {i} ".encode() * 30 for i in range(len(texts) - 1)]
    # named at the line the break cut (the one after the last record kept), with the decompressor's words
    [where] = m["totals"]["skipped_examples"]["truncated"]
    assert where.startswith(f"{tmp_path / 'in' / f'a.jsonl.{ext}'}:{len(texts)} (the compressed stream is cut or corrupt: ")


def test_corrupt_gzip_header(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl.gz": b"this is not gzip at all", "b.txt": b"x"})
    assert texts == [b"x"] and skipped(m) == {"truncated": 1}
    [where] = m["totals"]["skipped_examples"]["truncated"]
    assert where.startswith(f"{tmp_path / 'in' / 'a.jsonl.gz'}:1 (the compressed stream is cut or corrupt: "), where


# 19: parquet without the text column: every row counted.
def test_parquet_without_the_column(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    pq.write_table(pa.table({"body": ["a", "b", "c"]}), root / "a.parquet")
    pq.write_table(pa.table({"text": ["x", None, ""]}), root / "b.parquet")
    texts, m = run(tmp_path, {})
    assert texts == [b"x"]
    assert skipped(m) == {"missing_field": 3, "not_string": 1, "empty": 1}


# 20: a symlink loop in an input folder is not followed.
def test_symlink_loop(tmp_path):
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_bytes(b"x")
    os.symlink("..", root / "sub" / "loop")
    texts, m = run(tmp_path, {})
    assert texts == [b"x"]


# 21: an unreadable input (a dangling symlink named like an input) is one clear error.
def test_unreadable_input_is_an_error(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    os.symlink(tmp_path / "nowhere.jsonl", root / "a.jsonl")
    with pytest.raises(PackerError, match="cannot read input .*a.jsonl"):
        run(tmp_path, {})


# 22: a file that vanishes after discovery is counted as unreadable; the rest is built.
def test_file_vanishing_mid_build(tmp_path, monkeypatch):
    import importlib

    build_module = importlib.import_module("packer.pipeline.steps")  # where the build discovers its inputs
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.txt").write_bytes(b"first" * 1000)  # each file over unit_bytes: its own unit
    (root / "b.txt").write_bytes(b"second" * 1000)
    (root / "c.txt").write_bytes(b"third" * 1000)
    out = str(tmp_path / "out")
    real_discover = build_module.discover

    def discover_then_remove(*a, **kw):  # b.txt is planned, then gone before it is read
        found = real_discover(*a, **kw)
        os.unlink(root / "b.txt")
        return found

    # (Files are read ahead of tokenizing, so a progress callback is too late to race the reader.)
    monkeypatch.setattr(build_module, "discover", discover_then_remove)
    build(BuildConfig.of(inputs=(str(root),), out=out, seq_len=64, workers=1, unit_bytes=4096))
    docs, m = read_documents(out)
    assert [bytes(d[:-1].astype("uint8").tolist()) for d in docs] == [b"first" * 1000, b"third" * 1000]
    assert skipped(m) == {"unreadable": 1}
    assert "b.txt" in m["totals"]["skipped_examples"]["unreadable"][0]


# 23: the same path given twice is read once.
def test_same_path_twice(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.txt").write_bytes(b"once")
    res_texts, m = run(tmp_path, {}, inputs=(str(root / "a.txt"), str(root), str(root / "a.txt")))
    assert res_texts == [b"once"]


# 23b: one file reached by several names (a symlinked file, a symlinked input folder) is read once;
# an output folder inside the input, named through a symlink, is not read.
def test_one_file_by_several_names_is_read_once(tmp_path):
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"once")
    (root / "sub" / "b.txt").write_bytes(b"other")
    os.symlink(root / "a.txt", root / "sub" / "link.txt")
    os.symlink(root, tmp_path / "alias")
    found = discover([str(tmp_path / "alias"), str(root)], exclude=str(tmp_path / "alias" / "sub"))
    assert [f.path for f in found.files] == [str(tmp_path / "alias" / "a.txt")]
    found = discover([str(tmp_path / "alias"), str(root)])
    assert [os.path.basename(f.path) for f in found.files] == ["a.txt", "b.txt"]
    assert len(found.duplicates) == 4  # alias/sub/link.txt, then in/a.txt, in/sub/b.txt and in/sub/link.txt


# 24-25: inputs that do not exist.
def test_nonexistent_input(tmp_path):
    with pytest.raises(PackerError, match="input not found: .*nope"):
        run(tmp_path, {}, inputs=(str(tmp_path / "nope"),))


def test_glob_matching_nothing(tmp_path):
    with pytest.raises(PackerError, match="input glob matches nothing"):
        run(tmp_path, {}, inputs=(str(tmp_path / "*.jsonl"),))


def test_glob_inputs(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": jl({"text": "a"}), "b.jsonl": jl({"text": "b"}), "c.txt": b"c"},
                   inputs=(str(tmp_path / "in" / "*.jsonl"),))
    assert texts == [b"a", b"b"]


# 26: files of unsupported type inside a folder are ignored, and counted.
def test_unsupported_files_in_folder_are_counted(tmp_path):
    texts, m = run(tmp_path, {"a.txt": b"x", "b.pdf": b"%PDF", "c.csv": b"a,b"})
    assert texts == [b"x"] and m["totals"]["ignored_files"] == 2


# 27: a folder with no supported files.
def test_folder_without_inputs(tmp_path):
    with pytest.raises(PackerError, match="no input files found"):
        run(tmp_path, {"a.pdf": b"%PDF"})


# 28: --resume against a build made with another tokenizer.
def test_resume_with_other_tokenizer_is_refused(tmp_path, gpt2_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.txt").write_bytes(b"text")
    out = str(tmp_path / "out")
    build(BuildConfig.of(inputs=(str(root),), out=out, seq_len=64, workers=1))
    with pytest.raises(PackerError, match="cannot resume .*tokenizer was 'bytes'"):
        build(BuildConfig.of(inputs=(str(root),), out=out, seq_len=64, workers=1, tokenizer=gpt2_path, resume=True))


# 29: --resume after the input changed.
def test_resume_after_input_changed_is_refused(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.txt").write_bytes(b"text")
    out = str(tmp_path / "out")
    build(BuildConfig.of(inputs=(str(root),), out=out, seq_len=64, workers=1))
    (root / "b.txt").write_bytes(b"more")
    with pytest.raises(PackerError, match="input files changed"):
        build(BuildConfig.of(inputs=(str(root),), out=out, seq_len=64, workers=1, resume=True))


# 30: JSON with a lone surrogate escape cannot become UTF-8 text: counted.
def test_lone_surrogate_escape(tmp_path):
    texts, m = run(tmp_path, {"a.jsonl": b'{"text": "a\\ud800b"}\n' + jl({"text": "ok"})})
    assert texts == [b"ok"]
    assert sum(skipped(m).values()) == 1


# 31: output folder that cannot be created.
def test_unwritable_output(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("x")
    r = subprocess.run([sys.executable, "-m", "packer.cli", "build", str(tmp_path / "in"), str(tmp_path / "file" / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "file/out" in r.stderr


def test_readability_from_the_mode_bits_is_confirmed_by_access(tmp_path, monkeypatch):
    """Discovery reads permission bits instead of asking the file server; a file the bits
    call unreadable is checked with os.access, which has the last word."""
    f = tmp_path / "a.txt"
    f.write_bytes(b"x")
    monkeypatch.setattr(os, "geteuid", lambda: 4242)  # not root, not the owner
    monkeypatch.setattr(os, "getegid", lambda: 4242)
    monkeypatch.setattr(os, "getgroups", lambda: [4243])
    os.chmod(f, 0o604)
    assert _mode_readable(os.stat(f))  # "other" may read
    os.chmod(f, 0o640)
    assert not _mode_readable(os.stat(f))
    asked = []
    monkeypatch.setattr(os, "access", lambda p, mode: asked.append(p) or False)
    with pytest.raises(PackerError, match="cannot read input .*a.txt: permission denied"):
        discover([str(f)])
    assert asked == [str(f)]
    os.chmod(f, 0o644)
    asked.clear()
    assert [x.path for x in discover([str(f)]).files] == [str(f)] and asked == []
