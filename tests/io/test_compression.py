"""packer/io/compression.py: streaming decompression that reports a cut stream and stays bounded."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import zstandard

from tests.formats.test_awkward_inputs import jl


# 7. Memory bounded by settings, not input: decompression bombs and over-long records.
def _peak_rss_mb(code: str) -> float:
    r = subprocess.run([sys.executable, "-c", code + "\nimport resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[-1]) / 1024


def test_decompression_bomb_is_bounded_and_counted(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    bomb = zstandard.ZstdCompressor(level=3).compress(b"\0" * (256 << 20))  # 256 MB of NUL in a few KB
    assert len(bomb) < 64 << 10
    (root / "bomb.jsonl.zst").write_bytes(bomb)
    (root / "ok.jsonl").write_bytes(jl({"text": "fine"}))
    small = tmp_path / "small"
    small.mkdir()
    (small / "ok.jsonl").write_bytes(jl({"text": "fine"}))
    code = ("from packer import build; r = build({!r}, {!r}, seq_len=64, workers=1, max_record_mb=4); "
            "print(json.dumps(r.manifest['totals']['skipped']))")
    base = _peak_rss_mb("import json\n" + code.format(str(small), str(tmp_path / "o1")))
    peak = _peak_rss_mb("import json\n" + code.format(str(root), str(tmp_path / "o2")))
    # Bounded by --max-record-mb (4 MB, a few copies) and the 32 MB zstd step: far below 256 MB.
    assert peak < base + 160, (base, peak)
    m = json.load(open(tmp_path / "o2" / "manifest.json"))
    assert m["totals"]["skipped"] == {"too_long": 1}
    assert "bomb.jsonl.zst:1" in m["totals"]["skipped_examples"]["too_long"][0]
    assert m["totals"]["documents"] == 1
    assert m["settings"]["max_record_bytes"] == 4 << 20



TEXT = b"".join(b'{"text": "record %d %s"}\n' % (i, b"x" * (i % 50)) for i in range(30000))


def _compress(kind: str, data: bytes) -> bytes:
    import bz2
    import gzip
    import lzma

    if kind == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind](data)


KINDS = ["gzip", "zstd", "bz2", "xz"]


@pytest.mark.parametrize("kind", KINDS)
def test_streams_read_back_whole_and_concatenated(kind):
    from packer.io.compression import decompress_all, decompressing

    one = _compress(kind, TEXT)
    with decompressing(io.BytesIO(one + _compress(kind, b"second\n")), kind) as f:
        assert f.read() == TEXT + b"second\n"  # multi-member / multi-frame, as `cat a.gz b.gz` gives
    assert decompress_all(one, kind) == TEXT
    assert decompress_all(b"", kind) == b""  # an empty file is no stream, not a cut one


@pytest.mark.parametrize("kind", KINDS)
def test_a_cut_stream_hands_out_what_it_could_then_raises(kind):
    from packer.io.compression import decompressing, truncation_errors

    data = _compress(kind, TEXT)
    got = bytearray()
    with pytest.raises(truncation_errors(kind)):
        with decompressing(io.BytesIO(data[: len(data) * 2 // 3]), kind) as f:
            while chunk := f.read(4096):
                got += chunk
    assert TEXT.startswith(bytes(got))  # what came out is the start of the text, nothing made up
    if kind != "bz2":  # (bz2 decompresses whole 900 kB blocks: a cut within the first gives nothing)
        assert len(got) > 0


@pytest.mark.parametrize("kind", KINDS)
def test_corrupt_data_is_a_truncation_error_not_an_io_error(kind):
    from packer.io.compression import decompress_all, truncation_errors

    if kind == "zstd":  # a frame without its checksum can decode damaged literals to other bytes, silently
        import zstandard

        data = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(TEXT))
    else:
        data = bytearray(_compress(kind, TEXT))
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0x5A
    with pytest.raises(truncation_errors(kind)):
        decompress_all(bytes(data), kind)


def test_decompress_all_stops_past_its_limit():
    from packer.io.compression import decompress_all

    bomb = zstandard.ZstdCompressor().compress(b"\0" * (64 << 20))
    assert decompress_all(bomb, "zstd", limit=1 << 20) is None
    assert decompress_all(_compress("gzip", b"abc"), "gzip", limit=3) == b"abc"
    assert decompress_all(b"plain", None, limit=1) == b"plain"  # not compressed: as given


def test_every_suffix_names_a_compression_it_reads():
    from packer.io.compression import SUFFIXES, decompressing

    for kind in set(SUFFIXES.values()):
        with decompressing(io.BytesIO(_compress(kind, b"x\n")), kind) as f:
            assert f.read() == b"x\n"


@pytest.mark.parametrize("kind", ["gzip", "zstd", "bz2", "xz"])
def test_expanded_length_counts_a_prefix_and_stops_at_its_cap(kind):
    """Issue 52.3: what the start of a compressed stream decompresses to (the build's size estimate):
    the whole stream exactly, a prefix about in proportion, a cut stream without raising, and never past ``cap``."""
    import bz2
    import gzip
    import lzma

    from packer.io import expanded_length

    raw = b"".join(b'{"text": "line %d of some text"}\n' % i for i in range(100000))  # 3.7 MB
    pack = {"gzip": gzip.compress, "zstd": zstandard.ZstdCompressor().compress, "bz2": bz2.compress,
            "xz": lzma.compress}[kind]
    data = pack(raw)
    assert expanded_length(data, kind) == len(raw)
    half = expanded_length(data[: len(data) // 2], kind)
    assert 0.2 * len(raw) < half < len(raw)
    assert expanded_length(data, kind, cap=1000) <= 1 << 20  # (counted a read of at most 1 MiB at a time)
    assert expanded_length(b"not compressed at all", kind) == 0
    assert expanded_length(raw, None) == len(raw)
