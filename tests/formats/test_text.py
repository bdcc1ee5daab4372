"""packer/formats/text.py: .txt and .md files (and compressed): one document per file, read whole;
bad UTF-8, empty, cut or over --max-record-mb is one counted skip naming the file."""

from __future__ import annotations

from dataclasses import replace

import pytest
import zstandard

from packer.formats import discover, plan_slices, read_slice
from packer.formats.base import Document, Skip
from packer.formats.chat import ChatFields
from packer.formats.text import FORMAT, read_whole

from tests.formats.helpers import COMPRESS, accounted, run, skipped


def _slice(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    (sl, _), = plan_slices(discover([str(p)]).files, 1 << 30)
    return sl


def test_read_whole_is_the_file_in_one_part_or_one_skip(tmp_path):
    sl = _slice(tmp_path, "a.txt", b"x" * 100)
    seen = []
    part = read_whole(sl, seen.append)
    assert part.items == [b"x" * 100] and part.tail is None and part.nbytes == 100 and seen == [100]
    part = read_whole(sl, max_record=99)  # over the limit: not read at all
    assert part.items == [] and part.tail.reason == "too_long" and "100 bytes, over --max-record-mb" in part.tail.where
    (tmp_path / "a.txt").write_bytes(b"x" * 50)  # not the size discovery saw
    part = read_whole(sl)
    assert part.items == [] and part.tail == Skip("truncated", f"{sl.file.path}: the file changed while it was read "
                                                               "(100 bytes when found, 50 when read)")
    z = _slice(tmp_path, "b.txt.zst", zstandard.compress(b"text"))
    assert read_whole(z, max_record=1000).items == [((tmp_path / "b.txt.zst").read_bytes(), 1000)]  # decompressed where parsed


def test_parse_decodes_drops_a_bom_and_names_the_byte_of_bad_utf8(tmp_path):
    sl = _slice(tmp_path, "a.txt", b"\xef\xbb\xbfhello")
    assert list(read_slice(sl)) == [Document("hello")]
    sl = _slice(tmp_path, "b.md", b"ok \xff")
    assert list(read_slice(sl)) == [Skip("invalid_utf8", f"{sl.file.path}: byte 3")]
    sl = _slice(tmp_path, "c.txt.zst", zstandard.compress(b"y" * 5000))
    assert list(read_slice(sl)) == [Document("y" * 5000)]
    part = next(FORMAT.parts(sl, "text", None, 1 << 20, max_record=4999))
    assert [r.reason for r in FORMAT.parse(part, ("text",))] == ["too_long"]  # the limit holds decompressed
    part = replace(part, items=[(b"not zstd", 1 << 20)])
    [cut] = FORMAT.parse(part, ("text",))
    assert cut.reason == "truncated" and cut.where.startswith(f"{sl.file.path} (the compressed stream is cut or corrupt: ")


def test_a_text_file_holds_no_conversation_and_its_head_is_its_start(tmp_path):
    sl = _slice(tmp_path, "a.txt", "é".encode() * 1000)
    part = next(FORMAT.parts(sl, "text", None, 1 << 20))
    assert list(FORMAT.parse(part, ChatFields())) == [Skip("not_conversation", sl.file.path)]
    assert FORMAT.head(sl, 10) == "é" * 10
    z = _slice(tmp_path, "b.md.gz", COMPRESS[".gz"](b"head of it"))
    assert FORMAT.head(z, 4) == "head"
    (tmp_path / "b.md.gz").write_bytes(b"not gzip")
    assert FORMAT.head(z, 4) == ""


def test_invalid_utf8_txt_is_skipped(tmp_path):
    texts, m = run(tmp_path, {"a.txt": b"fine", "b.txt": b"bad \xff\xfe bytes"})
    assert texts == [b"fine"]
    assert skipped(m) == {"invalid_utf8": 1}


# 3-4: a byte-order mark is encoding, not text.
def test_bom_in_txt_is_dropped(tmp_path):
    texts, m = run(tmp_path, {"a.txt": b"\xef\xbb\xbfhello"})
    assert texts == [b"hello"]


# 7-8: empty files.
def test_empty_txt_is_counted(tmp_path):
    texts, m = run(tmp_path, {"a.txt": b"", "b.txt": b"x"})
    assert texts == [b"x"] and skipped(m) == {"empty": 1}


# 18: a binary file named .txt.
def test_binary_named_txt(tmp_path):
    texts, m = run(tmp_path, {"img.txt": bytes(range(256)) * 10, "b.txt": b"x"})
    assert texts == [b"x"] and skipped(m) == {"invalid_utf8": 1}


@pytest.mark.parametrize("ext", ["", ".gz", ".bz2", ".xz", ".zst"])
def test_text_formats_matrix(tmp_path, ext):
    z = COMPRESS.get(ext, lambda b: b)
    files = {"a.txt" + ext: z(b"fine text"), "b.md" + ext: z(b"bad \xff bytes"), "c.txt" + ext: z(b"")}
    if ext:
        files["d.txt" + ext] = z(" ".join(str(i * i) for i in range(50000)).encode())[:-40]
    texts, m = run(tmp_path, files)
    assert texts == [b"fine text"]
    want = {"invalid_utf8": 1, "empty": 1, **({"truncated": 1} if ext else {})}
    assert skipped(m) == want
    accounted(m, len(files))


def test_max_record_bounds_a_compressed_text_file_decompressed(tmp_path):
    """A .txt.zst whose text is over --max-record-mb once decompressed is skipped as too_long under
    that flag (not only under the default limit); a small one beside it is kept."""
    texts, m = run(tmp_path, {"big.txt.zst": zstandard.compress(b"y" * 5000),
                              "small.txt.zst": zstandard.compress(b"fine")}, max_record_mb=0.002)
    assert texts == [b"fine"] and skipped(m) == {"too_long": 1}
    assert "big.txt.zst (over --max-record-mb" in m["totals"]["skipped_examples"]["too_long"][0]
