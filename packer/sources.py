"""Sources: find input files, cut them into slices, read records with read-ahead.

Stage 1 of the pipeline. ``discover`` turns the user's paths (folders, files,
globs) into a sorted list of ``InputFile``; ``plan_slices`` cuts those into
``Slice``s of bounded size (byte ranges of plain jsonl, row-group ranges of
parquet, whole files otherwise); ``read_slice`` yields ``Record``s: the text of
one document, or a ``Skip`` naming why a record was dropped and where.

Reads go through ``ReadAhead``: a background thread pulls large blocks off the
file while the caller parses and tokenizes, so slow storage (a network mount,
a Windows drive under WSL) overlaps with compute.
"""

from __future__ import annotations

import glob as globlib
import gzip
import io
import os
import queue
import threading
import zlib
from dataclasses import dataclass
from typing import Iterator

import orjson

from .errors import InputError, PackerError

# Extension -> (format, compression). Longest suffix wins.
FORMATS = {
    ".txt": ("text", None),
    ".md": ("text", None),
    ".jsonl": ("jsonl", None),
    ".jsonl.gz": ("jsonl", "gzip"),
    ".jsonl.zst": ("jsonl", "zstd"),
    ".jsonl.zstd": ("jsonl", "zstd"),
    ".parquet": ("parquet", None),
}

READ_BLOCK = 8 << 20  # bytes per background read: large, sequential
READ_DEPTH = 4  # blocks in flight per open file


def detect_format(path: str) -> tuple[str, str | None] | None:
    name = path.lower()
    for suffix in sorted(FORMATS, key=len, reverse=True):
        if name.endswith(suffix):
            return FORMATS[suffix]
    return None


@dataclass(frozen=True)
class InputFile:
    path: str  # as discovered (relative paths stay relative)
    format: str  # "text" | "jsonl" | "parquet"
    compression: str | None
    size: int  # bytes on disk


@dataclass(frozen=True)
class Discovery:
    files: tuple[InputFile, ...]
    ignored: tuple[str, ...]  # files inside folders with an unsupported extension
    duplicates: tuple[str, ...]  # paths given more than once (read once)


def _is_within(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def discover(paths: list[str], exclude: str | None = None) -> Discovery:
    """Expand folders (recursively, sorted), files and globs into input files.

    ``exclude`` is a folder never read from (the output folder, when it sits
    inside an input folder). Raises ``PackerError`` for a missing input or an
    explicitly named file of unknown format.
    """
    found: list[str] = []
    ignored: list[str] = []
    for p in paths:
        if any(ch in p for ch in "*?["):
            matches = sorted(globlib.glob(p, recursive=True))
            if not matches:
                raise PackerError(f"input glob matches nothing: {p}")
            for m in matches:
                if os.path.isdir(m):
                    found.extend(_walk(m, ignored, exclude))
                elif detect_format(m):
                    found.append(m)
                else:
                    ignored.append(m)
        elif os.path.isdir(p):
            found.extend(_walk(p, ignored, exclude))
        elif os.path.exists(p):
            if detect_format(p) is None:
                raise PackerError(
                    f"unknown input format: {p} (supported: {', '.join(sorted(FORMATS))})"
                )
            found.append(p)
        elif os.path.islink(p):
            raise PackerError(f"input is a broken symlink: {p}")
        else:
            raise PackerError(f"input not found: {p}")

    files, seen, dups = [], set(), []
    for f in found:
        real = os.path.realpath(f)
        if real in seen:
            dups.append(f)
            continue
        seen.add(real)
        if exclude and _is_within(f, exclude):
            continue
        try:
            size = os.path.getsize(f)
        except OSError as e:
            raise PackerError(f"cannot read input {f}: {e.strerror}") from None
        if not os.access(f, os.R_OK):
            raise PackerError(f"cannot read input {f}: permission denied")
        fmt, comp = detect_format(f)
        files.append(InputFile(f, fmt, comp, size))
    return Discovery(tuple(files), tuple(ignored), tuple(dups))


def _walk(folder: str, ignored: list[str], exclude: str | None) -> list[str]:
    out = []
    # followlinks=False: a symlinked folder is not entered, so loops cannot occur.
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if exclude and _is_within(root, exclude):
            dirs[:] = []
            continue
        for n in sorted(names):
            if n.startswith("."):
                continue
            full = os.path.join(root, n)
            (out if detect_format(full) else ignored).append(full)
    # Sorted as paths (a/sub/x before b), not in os.walk's files-then-folders order.
    return sorted(out, key=lambda p: p.split(os.sep))


# --------------------------------------------------------------------------
# Slices: the input side of a work unit.


@dataclass(frozen=True)
class Slice:
    """Part of one input file. ``start``/``end`` are byte offsets for plain
    jsonl (records whose first byte lies in [start, end)), row-group indices
    for parquet, and 0/size for whole files (text, compressed jsonl)."""

    file: InputFile
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        if self.file.format == "parquet":
            return self.file.size  # refined in plan_slices via weights
        return self.end - self.start


def plan_slices(files: tuple[InputFile, ...], target_bytes: int) -> list[tuple[Slice, int]]:
    """Cut files into (slice, weight_bytes) pieces of at most ~target_bytes.

    Deterministic in the files and target alone, so a resumed build plans the
    same units. Compressed files cannot be split and stay whole.
    """
    out: list[tuple[Slice, int]] = []
    for f in files:
        if f.format == "jsonl" and f.compression is None and f.size > target_bytes:
            n = -(-f.size // target_bytes)
            step = -(-f.size // n)
            for i in range(n):
                s, e = i * step, min(f.size, (i + 1) * step)
                out.append((Slice(f, s, e), e - s))
        elif f.format == "parquet":
            import pyarrow.parquet as pq

            try:
                meta = pq.ParquetFile(f.path).metadata
            except Exception as e:  # pyarrow raises many types for a bad file
                raise PackerError(f"cannot read parquet file {f.path}: {e}") from None
            groups = [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
            start, acc = 0, 0
            for i, g in enumerate(groups):
                if acc and acc + g > target_bytes:
                    out.append((Slice(f, start, i), acc))
                    start, acc = i, 0
                acc += g
            out.append((Slice(f, start, len(groups)), acc))
        else:
            out.append((Slice(f, 0, f.size), f.size))
    return out


# --------------------------------------------------------------------------
# Records.


@dataclass(frozen=True)
class Skip:
    """A record that was not used; ``where`` is "path:line" (or "path")."""

    reason: str
    where: str


# Reasons a record is skipped, with what each means (shown by --help and docs).
SKIP_REASONS = {
    "invalid_utf8": "text is not valid UTF-8 (binary or wrongly encoded): skipped whole",
    "malformed_json": "a jsonl line that does not parse as a JSON object",
    "missing_field": "the text field is absent from the record",
    "not_string": "the text field holds something other than a string (or null)",
    "empty": "the text is the empty string",
    "truncated": "a compressed stream ends early or is corrupt: records before the break are kept",
    "unreadable": "the file could not be read (vanished, permission, I/O error)",
    "no_tokens": "the text encodes to no tokens at all (only with --no-eos)",
}


class ReadAhead(io.RawIOBase):
    """A raw, read-only stream fed by a background thread.

    The thread reads ``block`` bytes at a time, keeping up to ``depth`` blocks
    queued, so the consumer's parsing and tokenizing overlap with storage
    latency. Exceptions from the reader are re-raised in the consumer.
    """

    def __init__(self, f, block: int = READ_BLOCK, depth: int = READ_DEPTH,
                 limit: int | None = None, on_bytes=None):
        super().__init__()
        self._f = f
        self._limit = limit  # past this many bytes, read in small blocks only
        self._on_bytes = on_bytes
        self._q: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._buf = memoryview(b"")
        self._eof = False
        self._t = threading.Thread(target=self._run, args=(block,), daemon=True)
        self._t.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, block: int) -> None:
        try:
            done = 0
            while not self._stop.is_set():
                n = block
                if self._limit is not None:
                    # A ranged slice needs bytes past its end only to finish its
                    # last line: don't read whole blocks of the next slice.
                    n = self._limit - done if done < self._limit else 1 << 16
                    n = min(n, block)
                b = self._f.read(n)
                done += len(b)
                if b and self._on_bytes is not None:
                    self._on_bytes(len(b))
                if not self._put(b):
                    return
                if not b:
                    return
        except BaseException as e:  # forwarded to the consumer
            self._put(e)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            if self._eof:
                return 0
            item = self._q.get()
            if isinstance(item, BaseException):
                self._eof = True
                raise item
            if not item:
                self._eof = True
                return 0
            self._buf = memoryview(item)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        self._stop.set()
        if not self.closed:
            self._t.join(timeout=5)
            self._f.close()
        super().close()


def open_stream(path: str, compression: str | None, start: int = 0,
                limit: int | None = None, on_bytes=None) -> io.BufferedReader:
    """Open ``path`` for buffered, read-ahead, decompressed reading from ``start``.

    ``limit``: bytes the caller expects to need (more are read in small steps);
    ``on_bytes(n)`` is called from the read-ahead thread as raw bytes arrive.
    """
    raw = open(path, "rb", buffering=0)
    if start:
        raw.seek(start)
    ra = io.BufferedReader(ReadAhead(raw, limit=limit, on_bytes=on_bytes), buffer_size=1 << 20)
    if compression == "gzip":
        return io.BufferedReader(_GzipRaw(ra), buffer_size=1 << 20)
    if compression == "zstd":
        return io.BufferedReader(_ZstdRaw(ra), buffer_size=1 << 20)
    return ra


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

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._out:
            if self._d.eof:
                rest = self._d.unused_data
                self._d, self._fresh = self._new(), True
            else:
                rest = b""
            chunk = rest or self._f.read(256 << 10)
            if not chunk:
                if self._fresh:
                    return 0
                raise EOFError("compressed stream ends before its end marker")
            self._fresh = False
            self._out = memoryview(self._d.decompress(chunk))
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def _get_field(obj, path: tuple[str, ...]):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


_MISSING = object()
_TRUNCATION_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def read_slice(sl: Slice, text_field: str = "text", on_bytes=None) -> Iterator[str | Skip]:
    """Yield each record of ``sl`` in order: its text, or a ``Skip``.

    ``text_field`` may be a dotted path ("meta.text") into nested JSON objects.
    Text is returned exactly as decoded: no stripping, no normalising (a UTF-8
    byte-order mark at the start of a text file is dropped: it is encoding, not text).
    """
    f = sl.file
    try:
        if f.format == "text":
            yield from _read_text(f, on_bytes)
        elif f.format == "jsonl":
            yield from _read_jsonl(sl, tuple(text_field.split(".")), on_bytes)
        else:
            yield from _read_parquet(sl, text_field)
    except OSError as e:
        yield Skip("unreadable", f"{f.path}: {e.strerror or e}")


def _read_text(f: InputFile, on_bytes=None) -> Iterator[str | Skip]:
    with open_stream(f.path, f.compression, on_bytes=on_bytes) as s:
        data = s.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        yield Skip("invalid_utf8", f"{f.path}: byte {e.start}")
        return
    yield text if text else Skip("empty", f.path)


def _read_jsonl(sl: Slice, field: tuple[str, ...], on_bytes=None) -> Iterator[str | Skip]:
    f = sl.file
    ranged = f.compression is None and (sl.start > 0 or sl.end < f.size)
    begin = max(sl.start - 1, 0)
    line_no = None if sl.start > 0 else 0  # absolute line numbers known from file start
    pos = begin
    broken = _TRUNCATION_ERRORS
    if f.compression == "zstd":
        import zstandard

        broken = broken + (zstandard.ZstdError,)
    s = open_stream(f.path, f.compression, begin, sl.end - begin if ranged else None, on_bytes)
    try:
        if sl.start > 0:
            # Skip the rest of the line holding byte start-1: it belongs to the
            # previous slice (or, if that byte is '\n', we are at a line start).
            pos += len(s.readline())
        rel = 0  # line index within this slice
        while True:
            if ranged and pos >= sl.end:
                break
            try:
                line = s.readline()
            except broken:
                yield Skip("truncated", _where(sl, line_no, rel, pos))
                return
            if not line:
                break
            pos += len(line)
            rel += 1
            if line_no is not None:
                line_no += 1
                if line_no == 1 and line.startswith(b"\xef\xbb\xbf"):
                    line = line[3:]  # a byte-order mark is encoding, not text
            if not line.strip():
                continue  # blank lines separate nothing; not a record
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                reason = "invalid_utf8" if "UTF-8" in str(e) or "utf-8" in str(e) else "malformed_json"
                yield Skip(reason, _where(sl, line_no, rel, pos - len(line)))
                continue
            text = _get_field(obj, field)
            if text is _MISSING:
                yield Skip("missing_field", _where(sl, line_no, rel, pos - len(line)))
            elif not isinstance(text, str):
                yield Skip("not_string", _where(sl, line_no, rel, pos - len(line)))
            elif not text:
                yield Skip("empty", _where(sl, line_no, rel, pos - len(line)))
            else:
                yield text
    finally:
        s.close()


def _where(sl: Slice, line_no: int | None, rel: int, byte: int) -> str:
    if line_no is not None:
        return f"{sl.file.path}:{line_no}"
    return f"{sl.file.path}:{_count_lines_before(sl.file.path, byte) + 1}"


def _count_lines_before(path: str, byte: int) -> int:
    """Line index of ``byte`` in a plain file; only called to name a bad record."""
    n, left = 0, byte
    with open(path, "rb") as fh:
        while left > 0:
            chunk = fh.read(min(left, 8 << 20))
            if not chunk:
                break
            n += chunk.count(b"\n")
            left -= len(chunk)
    return n


def _read_parquet(sl: Slice, field: str) -> Iterator[str | Skip]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = sl.file
    pf = pq.ParquetFile(f.path)
    if field not in pf.schema_arrow.names:
        # Every row of these row groups lacks the field: count each one.
        rows = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start, sl.end))
        for i in range(rows):
            yield Skip("missing_field", f"{f.path}: row {i} (no column {field!r})")
        return
    row = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start))
    is_text = pa.types.is_string(pf.schema_arrow.field(field).type) or pa.types.is_large_string(
        pf.schema_arrow.field(field).type
    )
    for batch in pf.iter_batches(columns=[field], row_groups=range(sl.start, sl.end), batch_size=4096):
        col = batch.column(0)
        if not is_text:
            for i in range(len(col)):
                yield Skip("not_string", f"{f.path}: row {row + i}")
        else:
            for i, text in enumerate(col.to_pylist()):
                if text is None:
                    yield Skip("not_string", f"{f.path}: row {row + i}")
                elif not text:
                    yield Skip("empty", f"{f.path}: row {row + i}")
                else:
                    yield text
        row += len(col)


def strict_error(skip: Skip) -> InputError:
    return InputError(f"{skip.where}: {skip.reason} ({SKIP_REASONS[skip.reason]}); drop --strict to skip and count such records")
