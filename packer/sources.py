"""Sources: find input files, cut them into slices, read records with read-ahead.

Stage 1 of the pipeline. ``discover`` turns the user's paths (folders, files,
globs) into a sorted list of ``InputFile``; ``plan_slices`` cuts those into
``Slice``s of bounded size (byte ranges of plain jsonl, row-group ranges of
parquet, whole files otherwise); ``read_slice`` yields ``Record``s: the text of
one document, or a ``Skip`` naming why a record was dropped and where.

Reading is split so the build can spread it over cores: ``iter_parts`` does
the I/O and decompression, in order, and ``parse_part`` the per-record work
(JSON, UTF-8) on whichever core then tokenizes. Streamed files go through
``ReadAhead`` (several ``pread``s in flight from a thread pool) and small
whole files are read many at once (``iter_parts_many``), so slow storage (a
network mount, a Windows drive under WSL) overlaps with compute and does not
cost one round trip per file in series.
"""

from __future__ import annotations

import functools
import glob as globlib
import gzip
import io
import os
import stat
import threading
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import orjson

from . import storage
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

READ_BLOCK = 4 << 20  # bytes per read of a streamed file: large, sequential
READ_DEPTH = 4  # reads in flight per streamed file
FIRST_READ = 256 << 10  # the first read of a streamed file; later ones double up to READ_BLOCK
TAPER_MIN = 64 << 10  # the smallest block near a file's end (see ReadAhead._fill)
PART_BYTES = 256 << 10  # raw input per Part and per chunk: a tokenizer batch, ~0.1-0.2 s of one core
PREFETCH_FILES = 32  # whole files (text) read at once, ahead of the parser
PREFETCH_BYTES = 64 << 20  # ... and at most about this many bytes of them


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


def _io_thread() -> None:
    """Start of each read-ahead and prefetch thread: Linux's SCHED_BATCH for it.

    A reader thread wakes each time a read returns; as a normal thread it
    preempts whatever runs on its core, which at ``--workers 1`` is the
    tokenizer. A batch thread does not preempt on waking: it runs when the
    running thread's slice ends, with the same share of the core. Reads are
    issued far enough ahead that a few ms of delay costs nothing. Through a
    FUSE mount (6,747 small files, one core) this took the build's system
    time from 1.1-1.4 s to 0.8-0.9 s and its involuntary context switches
    from 37 k to 12.5 k. No-op where there is no SCHED_BATCH.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def discover(paths: list[str], exclude: str | None = None, on_sized=None) -> Discovery:
    """Expand folders (recursively, sorted), files and globs into input files.

    ``exclude`` is a folder never read from (the output folder, when it sits
    inside an input folder). Raises ``PackerError`` for a missing input or an
    explicitly named file of unknown format. ``on_sized(done, total)``, if
    given, is called as the files found are sized (a stat each: on a slow
    mount, a large tree takes a while).
    """
    if any(storage.is_uri(p) for p in paths) or storage.is_uri(exclude):
        return storage.discover(paths, exclude, on_sized)  # object storage (packer/storage.py)
    found: list[tuple[str, str | None]] = []  # (path, its real path where the walk knows it)
    ignored: list[str] = []
    ex_real = os.path.realpath(exclude).rstrip(os.sep) if exclude else None
    for p in paths:
        if any(ch in p for ch in "*?["):
            matches = sorted(globlib.glob(p, recursive=True))
            if not matches:
                raise PackerError(f"input glob matches nothing: {p}")
            for m in matches:
                if os.path.isdir(m):
                    found.extend(_walk(m, ignored, ex_real))
                elif detect_format(m):
                    found.append((m, None))
                else:
                    ignored.append(m)
        elif os.path.isdir(p):
            found.extend(_walk(p, ignored, ex_real))
        elif os.path.exists(p):
            if detect_format(p) is None:
                raise PackerError(
                    f"unknown input format: {p} (supported: {', '.join(sorted(FORMATS))})"
                )
            found.append((p, None))
        elif os.path.islink(p):
            raise PackerError(f"input is a broken symlink: {p}")
        else:
            raise PackerError(f"input not found: {p}")

    # One stat per file, asked by many threads at once: on a mount where each
    # call waits (network, FUSE) a tree of many small files would otherwise
    # pay every round trip in series.
    facts = []
    with ThreadPoolExecutor(PREFETCH_FILES, thread_name_prefix="packer-stat") as pool:
        for fact in pool.map(_file_facts, found):
            facts.append(fact)
            if on_sized is not None and (len(facts) % 256 == 0 or len(facts) == len(found)):
                on_sized(len(facts), len(found))
    files, seen, dups = [], set(), []
    for (f, _), (real, size, err, readable) in zip(found, facts):
        if real in seen:
            dups.append(f)
            continue
        seen.add(real)
        if ex_real is not None and (real == ex_real or real.startswith(ex_real + os.sep)):
            continue
        if err is not None:
            raise PackerError(f"cannot read input {f}: {err.strerror}")
        if not readable:
            raise PackerError(f"cannot read input {f}: permission denied")
        fmt, comp = detect_format(f)
        files.append(InputFile(f, fmt, comp, size))
    return Discovery(tuple(files), tuple(ignored), tuple(dups))


def _file_facts(item: tuple[str, str | None]) -> tuple[str, int, OSError | None, bool]:
    """(real path, size, error getting the size, readable) of one input file,
    from one ``stat`` (and a ``realpath`` only where the walk did not know it)."""
    path, real = item
    try:
        st = os.stat(path)
        size, err = st.st_size, None
    except OSError as e:
        size, err = -1, e
    # The mode bits answer for the usual case; os.access (a call to the file
    # server on a network mount) only confirms a file they say is unreadable.
    readable = err is None and (_mode_readable(st) or os.access(path, os.R_OK))
    return real or os.path.realpath(path), size, err, readable


def _mode_readable(st: os.stat_result) -> bool:
    """Whether the permission bits let this process read: False where they say no,
    or where there are no POSIX ids to compare (then os.access decides)."""
    if not hasattr(os, "geteuid"):
        return False
    uid = os.geteuid()
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IRUSR)
    if st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


def _walk(folder: str, ignored: list[str], ex_real: str | None) -> list[tuple[str, str | None]]:
    """(path, real path) of the input files under ``folder``, sorted as paths
    (a/sub/x before b). Names starting with "." are skipped, and a symlinked
    folder is not entered (so loops cannot occur). The real path comes from
    the folder's, resolved once, except for a file that is itself a symlink
    (None: resolved later): no per-file ``realpath``, which is a metadata
    call per path component on a network mount. ``ex_real``: the real path
    of a folder not to enter (the output)."""
    out = []

    def add(path: str, real: str | None) -> None:
        if detect_format(path):
            out.append((path, real))
        else:
            ignored.append(path)

    todo = [(folder, os.path.realpath(folder))]  # (folder, its real path): a walked subfolder is never a symlink
    while todo:
        root, real_root = todo.pop()
        if ex_real is not None and (real_root == ex_real or real_root.startswith(ex_real + os.sep)):
            continue
        try:
            with os.scandir(root) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue  # an unreadable folder is skipped, as os.walk does
        subdirs = []
        for e in entries:
            if e.name.startswith("."):
                continue
            if e.is_dir(follow_symlinks=False):
                subdirs.append((e.path, os.path.join(real_root, e.name)))
            elif not e.is_symlink():
                add(e.path, os.path.join(real_root, e.name))
            elif not e.is_dir():  # a symlinked file: resolved later; a symlinked folder is not entered
                add(e.path, None)
        todo.extend(reversed(subdirs))
    return sorted(out, key=lambda p: p[0].split(os.sep))


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
                meta = pq.ParquetFile(storage.source(f.path)).metadata
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
    """A raw, read-only stream over ``path`` from ``start``, with reads in flight.

    Blocks of ``block`` bytes are read with ``os.pread`` by a small thread
    pool, up to ``depth`` at once at increasing offsets, and handed out in
    order. On a local disk that is one sequential stream read ahead of the
    parser; on storage where every read waits (a network or FUSE mount) the
    waits overlap, so one file streams at ``depth`` blocks per round trip.
    Read errors are raised in the consumer, at the block that failed.
    """

    def __init__(self, path: str, start: int = 0, limit: int | None = None, on_bytes=None,
                 block: int = READ_BLOCK, depth: int = READ_DEPTH):
        super().__init__()
        if storage.is_uri(path):  # an object: each block is one ranged GET
            self._fd, self._remote = None, storage.RemoteFile(path)
            self._size, self._pread = self._remote.size, self._remote.pread
        else:
            self._fd = os.open(path, os.O_RDONLY)
            self._size = os.fstat(self._fd).st_size
            self._pread = functools.partial(os.pread, self._fd)
        self._next = self._start = self._taken = start  # next offset to ask for; first; end of blocks taken
        # A ranged slice needs bytes past start+limit only to finish its last
        # line: beyond that, ask for small blocks, not whole blocks of the next slice.
        self._big_end = None if limit is None else start + limit
        self._block, self._depth = block, depth
        self._step = min(FIRST_READ, block)
        self._on_bytes = on_bytes
        self._pool = ThreadPoolExecutor(depth, thread_name_prefix="packer-read", initializer=_io_thread)
        self._inflight: deque = deque()
        self._buf = memoryview(b"")
        self._fill()

    def _fill(self) -> None:
        # Ask ahead by about twice what the consumer has taken so far (and at
        # least FIRST_READ), up to ``depth`` reads: a reader that wants only
        # the first records (a sampler) costs little, a streaming one soon
        # has depth x block in flight. Blocks double from FIRST_READ to
        # ``block`` for the same reason.
        while (len(self._inflight) < self._depth and self._next < self._size
               and self._next - self._taken < max(FIRST_READ, 2 * (self._taken - self._start))):
            n = self._step
            self._step = min(2 * self._step, self._block)
            end = self._size if self._big_end is None else self._big_end
            if self._next < end:
                # Taper: no block over 1/8 of what is left, so the last bytes
                # come in small blocks. On a slow link the parser then starts on
                # them at once, instead of waiting for one 4 MB block at the end.
                n = min(n, end - self._next, max(TAPER_MIN, (end - self._next) // 8))
            else:
                n = 1 << 16
            self._inflight.append(self._pool.submit(self._pread, n, self._next))
            self._next += n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            if not self._inflight:
                return 0
            data = self._inflight.popleft().result()
            if not data:  # the file shrank under us: stop here
                self._inflight.clear()
                return 0
            self._taken += len(data)
            self._fill()
            if self._on_bytes is not None:
                self._on_bytes(len(data))
            self._buf = memoryview(data)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            # Do not wait for reads still running (on a slow link that could
            # be seconds): the last of them closes the file when it returns.
            running = [f for f in self._inflight if not f.cancel()]
            self._pool.shutdown(wait=False)
            if not running:
                self._close_file()
            else:
                left, lock = [len(running)], threading.Lock()

                def done(_):
                    with lock:
                        left[0] -= 1
                        last = left[0] == 0
                    if last:
                        self._close_file()

                for f in running:
                    f.add_done_callback(done)
        super().close()

    def _close_file(self) -> None:
        os.close(self._fd) if self._fd is not None else self._remote.close()


def open_stream(path: str, compression: str | None, start: int = 0,
                limit: int | None = None, on_bytes=None) -> io.BufferedReader:
    """Open ``path`` for buffered, read-ahead, decompressed reading from ``start``.

    ``limit``: bytes the caller expects to need (more are read in small steps);
    ``on_bytes(n)`` is called as raw bytes reach the reader.
    """
    ra = io.BufferedReader(ReadAhead(path, start, limit, on_bytes), buffer_size=1 << 20)
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



# --------------------------------------------------------------------------
# Reading is split in two so that it can be spread over cores: ``iter_parts``
# (I/O and decompression: cheap, done once, in order) cuts a slice into Parts
# of raw records; ``parse_part`` (JSON and UTF-8 decoding: per record, done on
# the core that then tokenizes them) turns a Part into texts and Skips.
# ``read_slice`` is the two in sequence.


@dataclass(frozen=True)
class Part:
    """Records of one slice, read but not yet parsed; about ``PART_BYTES`` of them."""

    sl: Slice
    kind: str  # "lines": jsonl lines (bytes, newline kept) | "file": [whole text file bytes] | "records": str | Skip
    items: list
    line0: int | None = 0  # lines: lines of the file before items[0]; None where unknown (slice from mid-file)
    pos0: int = 0  # lines: byte offset of items[0] in the (decompressed) file
    tail: Skip | None = None  # a read error met after the last item: truncated stream, unreadable file
    nbytes: int = 0  # raw bytes in items


def read_slice(sl: Slice, text_field: str = "text", on_bytes=None) -> Iterator[str | Skip]:
    """Yield each record of ``sl`` in order: its text, or a ``Skip``.

    ``text_field`` may be a dotted path ("meta.text") into nested JSON objects.
    Text is returned exactly as decoded: no stripping, no normalising (a UTF-8
    byte-order mark at the start of a file is dropped: it is encoding, not text).
    """
    field = tuple(text_field.split("."))
    for part in iter_parts(sl, text_field, on_bytes):
        yield from parse_part(part, field)


def iter_parts(sl: Slice, text_field: str = "text", on_bytes=None,
               part_bytes: int | None = None) -> Iterator[Part]:
    """Read ``sl`` into Parts of whole records (about ``part_bytes``, default
    PART_BYTES), in order. Never raises OSError: a read error ends the slice
    with a ``tail`` Skip("unreadable")."""
    part_bytes = part_bytes or PART_BYTES
    f = sl.file
    if f.format == "text":
        yield read_text_part(sl, on_bytes)
    elif f.format == "jsonl":
        yield from _jsonl_parts(sl, on_bytes, part_bytes)
    else:
        yield from _parquet_parts(sl, text_field, part_bytes)


def read_text_part(sl: Slice, on_bytes=None) -> Part:
    """A whole text file as one Part (safe to call from many threads at once)."""
    try:
        if storage.is_uri(sl.file.path):
            data = storage.read_bytes(sl.file.path)
        else:
            data = _read_whole(sl.file.path, sl.file.size)
    except OSError as e:
        return Part(sl, "file", [], tail=_unreadable(sl, e))
    if on_bytes is not None:
        on_bytes(len(data))
    return Part(sl, "file", [data], nbytes=len(data))


def _read_whole(path: str, size: int) -> bytes:
    """A file's bytes in as few system calls as we can: open, one read, close.

    ``open(path, "rb").read()`` makes nine calls (two fstats, an ioctl, two
    lseeks, a read, a read that finds the end, a close); on a network or
    FUSE mount each can be a round trip, and with thousands of small files
    they cost the build more CPU than it spends on a file's text. Asking
    for one byte more than discovery saw tells in the same call whether the
    file still ends there; any other answer (it shrank or grew, or the read
    was capped at 2 GiB) reads on to the end.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        data = os.read(fd, size + 1)
        if len(data) == size:
            return data
        parts = [data]
        while chunk := os.read(fd, 1 << 24):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def _unreadable(sl: Slice, e: OSError) -> Skip:
    return Skip("unreadable", f"{sl.file.path}: {e.strerror or e}")


def _jsonl_parts(sl: Slice, on_bytes, part_bytes: int) -> Iterator[Part]:
    f = sl.file
    ranged = f.compression is None and (sl.start > 0 or sl.end < f.size)
    begin = max(sl.start - 1, 0)
    line_no = None if sl.start > 0 else 0  # absolute line numbers known from file start
    pos = begin
    broken = _TRUNCATION_ERRORS
    if f.compression == "zstd":
        import zstandard

        broken = broken + (zstandard.ZstdError,)
    lines: list[bytes] = []
    n_bytes, line0, pos0 = 0, line_no, pos
    tail = None
    try:
        s = open_stream(f.path, f.compression, begin, sl.end - begin if ranged else None, on_bytes)
    except OSError as e:
        yield Part(sl, "lines", [], tail=_unreadable(sl, e))
        return
    try:
        if sl.start > 0:
            # Skip the rest of the line holding byte start-1: it belongs to the
            # previous slice (or, if that byte is '\n', we are at a line start).
            pos += len(s.readline())
            pos0 = pos
        while True:
            if ranged and pos >= sl.end:
                break
            try:
                line = s.readline()
            except broken:
                tail = Skip("truncated", _where(sl, line_no, 0, pos))
                break
            if not line:
                break
            lines.append(line)
            pos += len(line)
            n_bytes += len(line)
            if line_no is not None:
                line_no += 1
            if n_bytes >= part_bytes:
                yield Part(sl, "lines", lines, line0, pos0, None, n_bytes)
                lines, n_bytes, line0, pos0 = [], 0, line_no, pos
    except OSError as e:
        tail = _unreadable(sl, e)
    finally:
        s.close()
    if lines or tail is not None:
        yield Part(sl, "lines", lines, line0, pos0, tail, n_bytes)


def _parquet_parts(sl: Slice, field: str, part_bytes: int) -> Iterator[Part]:
    items: list = []
    n_bytes = 0
    try:
        for rec in _read_parquet(sl, field):
            items.append(rec)
            if isinstance(rec, str):
                n_bytes += len(rec)
                if n_bytes >= part_bytes:
                    yield Part(sl, "records", items, nbytes=n_bytes)
                    items, n_bytes = [], 0
    except OSError as e:
        yield Part(sl, "records", items, tail=_unreadable(sl, e), nbytes=n_bytes)
        return
    if items:
        yield Part(sl, "records", items, nbytes=n_bytes)


def parse_part(part: Part, field: tuple[str, ...]) -> Iterator[str | Skip]:
    """Yield the records of ``part`` in order: texts, or Skips naming where and why."""
    sl = part.sl
    if part.kind == "file":
        for data in part.items:
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as e:
                yield Skip("invalid_utf8", f"{sl.file.path}: byte {e.start}")
                continue
            yield text if text else Skip("empty", sl.file.path)
    elif part.kind == "records":
        yield from part.items
    else:
        line_no, pos = part.line0, part.pos0
        loads, decode_error, missing = orjson.loads, orjson.JSONDecodeError, _MISSING
        for line in part.items:
            start = pos
            pos += len(line)
            if line_no is not None:
                line_no += 1
                if line_no == 1 and line.startswith(b"\xef\xbb\xbf"):
                    line = line[3:]  # a byte-order mark is encoding, not text
            try:
                obj = loads(line)
            except decode_error as e:
                if not line.strip():
                    continue  # blank lines separate nothing; not a record
                reason = "invalid_utf8" if "UTF-8" in str(e) or "utf-8" in str(e) else "malformed_json"
                yield Skip(reason, _where(sl, line_no, 0, start))
                continue
            text = obj.get(field[0], missing) if len(field) == 1 and type(obj) is dict else _get_field(obj, field)
            if type(text) is str and text:
                yield text
            elif text is missing:
                yield Skip("missing_field", _where(sl, line_no, 0, start))
            elif not isinstance(text, str):
                yield Skip("not_string", _where(sl, line_no, 0, start))
            else:
                yield Skip("empty", _where(sl, line_no, 0, start))
    if part.tail is not None:
        yield part.tail


def iter_parts_many(slices, text_field: str = "text", on_bytes=None, prefetch: int = PREFETCH_FILES):
    """``iter_parts`` over a sequence of (key, slice), in order; yields (key, Part).

    A ``None`` slice is passed through as (key, None), a marker for the
    caller. Whole-file slices (text files) are read ``prefetch`` at a time by
    a thread pool, so a tree of many small files on slow storage does not pay
    one round trip per file in series.
    """
    pool = ThreadPoolExecutor(prefetch, thread_name_prefix="packer-prefetch", initializer=_io_thread)
    ahead: deque = deque()  # (key, slice or None, future or None), in order
    it = iter(slices)
    exhausted = False
    try:
        while True:
            # Bounded by count and by bytes, so a tree of big text files is not all in memory.
            while not exhausted:
                reading = [a[1].file.size for a in ahead if a[2] is not None]
                if len(reading) >= prefetch or (reading and sum(reading) >= PREFETCH_BYTES):
                    break
                try:
                    key, sl = next(it)
                except StopIteration:
                    exhausted = True
                    break
                fut = pool.submit(read_text_part, sl, on_bytes) if sl is not None and sl.file.format == "text" else None
                ahead.append((key, sl, fut))
                if fut is None and sl is not None:
                    break  # a streamed slice reads ahead by itself
            if not ahead:
                return
            key, sl, fut = ahead.popleft()
            if sl is None:
                yield key, None
            elif fut is not None:
                yield key, fut.result()
            else:
                for part in iter_parts(sl, text_field, on_bytes):
                    yield key, part
    finally:
        for a in ahead:
            if a[2] is not None:
                a[2].cancel()
        pool.shutdown(wait=True)


def _where(sl: Slice, line_no: int | None, rel: int, byte: int) -> str:
    if line_no is not None:
        return f"{sl.file.path}:{line_no}"
    return f"{sl.file.path}:{_count_lines_before(sl.file.path, byte) + 1}"


def _count_lines_before(path: str, byte: int) -> int:
    """Line index of ``byte`` in a plain file; only called to name a bad record."""
    n, left = 0, byte
    with (storage.open_read(path) if storage.is_uri(path) else open(path, "rb")) as fh:
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
    pf = pq.ParquetFile(storage.source(f.path))
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
