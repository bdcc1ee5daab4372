"""Streaming decompression that reports a truncated stream.

The standard readers end silently (zstandard) or drop the bytes they
decompressed in the failing call (gzip) at a cut stream; these raise
``EOFError`` after handing out every byte they could decompress, so the
reader can keep the records before the break and count a ``truncated`` skip.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib

# Compressed bytes fed to zstd per call. zstandard's decompressobj has no
# output bound, and zstd expands at most ~32,768x (an RLE block: 4 bytes give
# 128 KB), so one call returns at most ~32 MB however the input was made: a
# decompression bomb costs that, not the gigabytes it unpacks to.
ZSTD_FEED = 1 << 10

# Errors that mean "the compressed stream is cut or corrupt".
TRUNCATION_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)

# File-name endings of the compressions packer reads, after the format's own (".jsonl.gz", ".txt.xz").
SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}


def truncation_errors(compression: str | None) -> tuple[type[BaseException], ...]:
    """The exceptions a reader of ``compression`` raises at a cut or corrupt stream."""
    if compression == "zstd":
        import zstandard

        return TRUNCATION_ERRORS + (zstandard.ZstdError,)
    return TRUNCATION_ERRORS


def decompressing(raw, compression: str | None):
    """A buffered reader of ``raw`` (a binary stream) decompressed; ``raw`` itself when not compressed."""
    if compression == "gzip":
        return io.BufferedReader(_GzipRaw(raw), buffer_size=1 << 20)
    if compression == "zstd":
        return io.BufferedReader(_ZstdRaw(raw), buffer_size=1 << 20)
    if compression == "bz2":
        return io.BufferedReader(_StdlibRaw(raw, bz2.BZ2Decompressor, OSError), buffer_size=1 << 20)
    if compression == "xz":
        return io.BufferedReader(_StdlibRaw(raw, lzma.LZMADecompressor, lzma.LZMAError), buffer_size=1 << 20)
    return raw


def decompress_all(data: bytes, compression: str | None, limit: int | None = None) -> bytes | None:
    """``data`` decompressed whole (a compressed text file: one document); None if
    that is over ``limit`` bytes (read no further: a decompression bomb stays
    bounded); raises one of ``truncation_errors(compression)`` at a cut or corrupt stream."""
    if compression is None:
        return data
    with decompressing(io.BytesIO(data), compression) as f:
        out = f.read() if limit is None else f.read(limit + 1)
    return None if limit is not None and len(out) > limit else out


def expanded_length(data: bytes, compression: str | None, cap: int = 128 << 20) -> int:
    """How many bytes ``data``, the start of a ``compression`` stream (or all of it), decompresses to:
    counted as it streams, none kept; a cut or corrupt stream counts what came before the break, and
    the count stops once at ``cap`` or past it by less than a 1 MiB read (a decompression bomb costs
    that much work, no more)."""
    if compression is None:
        return len(data)
    n = 0
    f = decompressing(io.BytesIO(data), compression)
    try:
        while n < cap:
            got = f.read1(1 << 20)
            if not got:
                break
            n += len(got)
    except (*truncation_errors(compression), OSError):
        pass  # a prefix ends mid-stream: what came before is the count
    return n


class CorruptStream(EOFError):
    """A compressed stream that is corrupt (rather than cut short); an EOFError so readers treat both alike."""


class _StdlibRaw(io.RawIOBase):
    """Streaming bz2 or xz (multi-stream, as ``bzip2``/``xz`` write when
    concatenated) that hands out every byte it could decompress before raising
    EOFError on a cut stream, or ``CorruptStream`` on corrupt data (bz2 raises
    a bare OSError for that, which would read as an I/O error)."""

    def __init__(self, f, factory, corrupt: type[BaseException]):
        super().__init__()
        self._f, self._new, self._corrupt = f, factory, corrupt
        self._d = factory()
        self._fresh = True  # no input fed to the current stream yet

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while True:
            if self._d.eof:
                rest = self._d.unused_data
                if not rest:
                    rest = self._f.read(1 << 20)
                    if not rest:
                        return 0  # clean end after a complete stream
                self._d, self._fresh = self._new(), True
            elif self._d.needs_input:
                rest = self._f.read(1 << 20)
                if not rest:
                    if self._fresh:
                        return 0  # an empty file
                    raise EOFError("compressed stream ends before its end marker")
            else:
                rest = b""
            self._fresh = False
            try:
                out = self._d.decompress(rest, len(b))
            except self._corrupt as e:
                raise CorruptStream(f"corrupt compressed data: {e}") from None
            if out:
                b[: len(out)] = out
                return len(out)

    def close(self) -> None:
        self._f.close()
        super().close()


class _GzipRaw(io.RawIOBase):
    """Streaming gzip (multi-member) that hands out every byte it could
    decompress before raising EOFError on a truncated stream. (GzipFile.read(n)
    raises without returning the data it decompressed in that call.)"""

    def __init__(self, f):
        super().__init__()
        self._f = f
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = b""
        self._started = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while True:
            # eof first: a member that ends where max_length cut the output leaves the next member in
            # unused_data *and* in unconsumed_tail, and decompressing that tail again only appends it
            # to unused_data, for ever (a second gzip member after a first of over a read's length).
            if self._d.eof:
                rest = self._d.unused_data
                if not rest:
                    rest = self._f.read(1 << 20)
                    if not rest:
                        return 0  # clean end after a complete member
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out = self._d.decompress(rest, len(b))
            elif self._d.unconsumed_tail:
                out = self._d.decompress(self._d.unconsumed_tail, len(b))
            else:
                chunk = self._f.read(1 << 20)
                if not chunk:
                    if not self._started:
                        return 0  # an empty file holds no stream (not a cut one)
                    raise EOFError("compressed stream ends before its end marker")
                self._started = True
                out = self._d.decompress(chunk, len(b))
            if out:
                b[: len(out)] = out
                return len(out)

    def close(self) -> None:
        self._f.close()
        super().close()


class _ZstdRaw(io.RawIOBase):
    """Streaming zstd (multi-frame) that raises EOFError on a truncated stream.
    (zstandard's stream_reader ends silently at a truncated frame.)"""

    def __init__(self, f):
        super().__init__()
        import zstandard

        self._new = zstandard.ZstdDecompressor().decompressobj
        self._f = f
        self._d = self._new()
        self._fresh = True  # no input fed to the current frame yet
        self._out = memoryview(b"")
        self._in = memoryview(b"")  # compressed bytes read but not yet fed

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._out:
            if self._d.eof:
                # unused_data: what the ended frame was not fed plus what is still pending.
                rest = self._d.unused_data + bytes(self._in)
                self._d, self._fresh = self._new(), True
                self._in = memoryview(rest)
            if not self._in:
                self._in = memoryview(self._f.read(256 << 10))
                if not self._in:
                    if self._fresh:
                        return 0
                    raise EOFError("compressed stream ends before its end marker")
            self._fresh = False
            feed, self._in = self._in[:ZSTD_FEED], self._in[ZSTD_FEED:]
            self._out = memoryview(self._d.decompress(feed))
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        self._f.close()
        super().close()
