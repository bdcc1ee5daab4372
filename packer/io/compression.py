"""Streaming decompression that reports a truncated stream.

The standard readers end silently (zstandard) or drop the bytes they
decompressed in the failing call (gzip) at a cut stream; these raise
``EOFError`` after handing out every byte they could decompress, so the
reader can keep the records before the break and count a ``truncated`` skip.
"""

from __future__ import annotations

import gzip
import io
import zlib

# Compressed bytes fed to zstd per call. zstandard's decompressobj has no
# output bound, and zstd expands at most ~32,768x (an RLE block: 4 bytes give
# 128 KB), so one call returns at most ~32 MB however the input was made: a
# decompression bomb costs that, not the gigabytes it unpacks to.
ZSTD_FEED = 1 << 10

# Errors that mean "the compressed stream is cut or corrupt".
TRUNCATION_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


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
    return raw


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
            if self._d.unconsumed_tail:
                out = self._d.decompress(self._d.unconsumed_tail, len(b))
            else:
                if self._d.eof:
                    rest = self._d.unused_data
                    if not rest:
                        rest = self._f.read(1 << 20)
                        if not rest:
                            return 0  # clean end after a complete member
                    self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    out = self._d.decompress(rest, len(b))
                else:
                    chunk = self._f.read(1 << 20)
                    if not chunk:
                        raise EOFError("compressed stream ends before its end marker")
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
