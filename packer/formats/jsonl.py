"""JSON Lines (.jsonl, .ndjson, each also .gz, .zst, .bz2, .xz): one JSON object per line, the text in ``--text-field``.

A plain file is cut into byte ranges (a record belongs to the range holding
its first byte); a compressed one cannot be split and is one slice. Lines
are read (I/O, decompression) in order on one thread; JSON and UTF-8 are
decoded on the core that tokenizes them.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import replace
from typing import Iterator

import orjson

from ..io import COMPRESSION_SUFFIXES, open_stream, storage_for, truncation_errors
from .base import (DEFAULT_MAX_RECORD, LET_GO_BYTES, Document, Format, InputFile, Part, Record, Skip, Slice, changed, first_line,
                   keys_of, unreadable)
from .chat import ChatFields, Conversation, conversation_of, dict_getter, paths

_MISSING = object()


class Jsonl(Format):
    name = "jsonl"
    suffixes = {ext + z: comp for ext in (".jsonl", ".ndjson") for z, comp in {"": None, **COMPRESSION_SUFFIXES}.items()}

    def plan(self, f: InputFile, target_bytes: int) -> list[tuple[Slice, int]]:
        if f.compression is not None or f.size <= target_bytes:
            return [(Slice(f, 0, f.size), f.size)]
        n = -(-f.size // target_bytes)
        step = -(-f.size // n)
        out = []
        for i in range(n):
            s, e = i * step, min(f.size, (i + 1) * step)
            out.append((Slice(f, s, e), e - s))
        return out

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int,
              max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Part]:
        """Longer than 60 lines: one read loop whose position, line number and bounded-line state every branch updates."""
        f = sl.file
        ranged = f.compression is None and (sl.start > 0 or sl.end < f.size)
        begin = max(sl.start - 1, 0)
        line_no = None if sl.start > 0 else 0  # absolute line numbers known from file start
        pos = begin
        broken = truncation_errors(f.compression)
        lines: list[bytes] = []
        n_bytes, line0, pos0 = 0, line_no, pos
        tail = None
        try:
            s = open_stream(f.path, f.compression, begin, sl.end - begin if ranged else None, on_bytes)
        except OSError as e:
            yield Part(sl, [], tail=unreadable(sl, e))
            return
        try:
            if sl.start > 0:
                # Skip the rest of the line holding byte start-1: it belongs to the
                # previous slice (or, if that byte is '\n', we are at a line start).
                # Bounded by the range's end: a line that runs past it leaves no record to this range, and
                # reading it to its end made every 1 MB range inside a long line read the rest of that line.
                pos += _skip_line(s, b"", sl.end - pos if ranged else None)
                pos0 = pos
            while True:
                if ranged and pos >= sl.end:
                    break
                try:
                    line = s.readline(max_record + 1)  # bounded: memory set by --max-record-mb, not the input
                    if len(line) > max_record and not line.endswith(b"\n"):
                        # Too long to hold: drop it, bounded, and count it where it starts.
                        if lines:
                            yield Part(sl, lines, line0, pos0, None, n_bytes)
                        start = pos
                        pos += _skip_line(s, line)
                        if line_no is not None:
                            line_no += 1
                        yield Part(sl, [], tail=Skip("too_long", where(sl, line_no, start) +
                                                      f" (over --max-record-mb {max_record / (1 << 20):g})"))
                        lines, n_bytes, line0, pos0 = [], 0, line_no, pos
                        continue
                    if line and line[0] in _SPACE and not line.strip():
                        line = _blank_run(s, line)  # a run of blank lines is one item: its cost is the reading
                except broken as e:  # at the line after the last one read: named with the decompressor's words
                    tail = Skip("truncated", f"{where(sl, None if line_no is None else line_no + 1, pos)} "
                                             f"(the compressed stream is cut or corrupt: {first_line(e)})")
                    break
                if not line:
                    break
                lines.append(line)
                if type(line) is BlankRun:
                    pos += line.nbytes
                    n_bytes += line.nbytes
                    if line_no is not None:
                        line_no += line.lines
                else:
                    pos += len(line)
                    n_bytes += len(line)
                    if line_no is not None:
                        line_no += 1
                if n_bytes >= part_bytes:
                    line = None  # the Part holds it (and may let it go: Jsonl.let_go), not this frame
                    yield Part(sl, lines, line0, pos0, None, n_bytes)
                    lines, n_bytes, line0, pos0 = [], 0, line_no, pos
        except OSError as e:
            tail = unreadable(sl, e)
        finally:
            s.close()
        if tail is None:
            # A plain file that ends before the slice does, or a file changed
            # since it was found: records would be lost (or mixed) uncounted.
            if f.compression is None and pos < min(sl.end, f.size):
                now = storage_for(f.path).stamp()  # a range past the end starts beyond it: name the end itself
                tail = Skip("truncated", f"{f.path}: the file changed while it was read "
                                         f"(ends at byte {min(pos, now[0]) if now else pos:,}, {f.size:,} when found)")
            else:
                tail = changed(sl, storage_for(f.path).stamp())
        if lines or tail is not None:
            yield Part(sl, lines, line0, pos0, tail, n_bytes)

    location_kind = "line"

    def locations(self, part: Part) -> list[int]:
        # parse() makes one record of every line that is not blank, in order.
        if part.line0 is None:  # a slice from mid-file: its line numbers counted once, from the part's first byte
            part = replace(part, line0=_count_lines_before(part.sl.file.path, part.pos0))
        return [line_no for line, line_no, _ in lines_of(part) if line.strip()]

    def where_of(self, part: Part, record: int) -> str:
        # parse() makes one record of every line that is not blank, in order.
        for line, line_no, start in lines_of(part):
            if line.strip():
                if record == 0:
                    return where(part.sl, line_no, start)
                record -= 1
        return part.sl.file.path

    def fields(self, sl: Slice, records: int = 50) -> list[str] | None:
        return json_keys((line for part in self.parts(sl, "", None, 64 << 10) for line in part.items), records)

    def let_go(self, part: Part) -> None:
        if part.nbytes >= LET_GO_BYTES:  # (else no line of it is that long: the usual part costs one compare)
            part.items[:] = [Spent(len(x)) if len(x) >= LET_GO_BYTES else x for x in part.items]

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        if type(field) is ChatFields:
            yield from _parse_chat(part, field)
            return
        sl = part.sl
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
                    if type(line) is BlankRun and line_no is not None:
                        line_no += line.lines - 1
                    if type(line) is BlankRun:
                        pos += line.nbytes - len(line)
                    continue  # blank lines separate nothing; not a record
                obj = _lenient(line, str(e))
                if obj is None:
                    reason = "invalid_utf8" if "UTF-8" in str(e) or "utf-8" in str(e) else "malformed_json"
                    yield Skip(reason, where(sl, line_no, start))
                    continue
            text = obj.get(field[0], missing) if len(field) == 1 and type(obj) is dict else get_field(obj, field)
            if type(text) is str and text:
                if obj is not None and type(obj) is _Lenient and not _utf8_ok(text):
                    yield Skip("invalid_utf8", where(sl, line_no, start))  # a lone surrogate cannot be UTF-8 text
                    continue
                yield Document(text)
            elif text is missing:
                yield Skip("missing_field", where(sl, line_no, start))
            elif not isinstance(text, str):
                yield Skip("not_string", where(sl, line_no, start))
            else:
                yield Skip("empty", where(sl, line_no, start))


class _Lenient(dict):
    """A record parsed by the standard library (see ``_lenient``)."""


def _lenient(line: bytes, message: str):
    """The record orjson refused for what is valid JSON: an integer wider
    than 64 bits, or a lone surrogate escape (in any field: only the text
    field matters, and it is checked after). None where it is not JSON."""
    low = message.lower()
    if not any(w in low for w in ("surrogate", "64-bit", "integer", "number")) or "not valid utf-8" in low:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return _Lenient(obj) if type(obj) is dict else obj


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


_SPACE = b" \t\n\r\x0b\x0c"  # what bytes.strip() strips: a line of only these is blank
_NEWLINES = b"\n" * (1 << 20)  # as long as a read buffer


class BlankRun(bytes):
    """A run of blank lines read as one item (``b"\\n"``, not held): ``lines`` lines, ``nbytes`` bytes.
    1 GiB of blank lines is a few items, not 10^9 lines each parsed (and refused) by orjson."""

    def __new__(cls, lines: int, nbytes: int):
        self = super().__new__(cls, b"\n")
        self.lines, self.nbytes = lines, nbytes
        return self

    def __reduce__(self):  # pickled as its counts (Parts travel to worker processes)
        return BlankRun, (self.lines, self.nbytes)


class Spent(bytes):
    """A line let go of once parsed (``Jsonl.let_go``): ``b"x"`` (a record, not blank), ``nbytes`` long."""

    def __new__(cls, nbytes: int):
        self = super().__new__(cls, b"x")
        self.nbytes = nbytes
        return self


def _blank_run(s, first: bytes) -> bytes:
    """``first`` (a blank line) and the blank lines right after it in ``s``, taken from the
    buffer in blocks (C-speed ``lstrip``, no per-line Python): ``first`` itself if none follow,
    else one ``BlankRun``. A line that is not blank (or not yet ended) is left in ``s``."""
    lines, nbytes = 1, len(first)
    if not first.endswith(b"\n"):
        return first
    while True:
        buf = s.peek(1 << 16)  # what the buffer holds (up to 1 MiB)
        if not buf:
            break
        if _NEWLINES.startswith(buf):  # only "\n": one memcmp (lstrip and count look at each byte)
            end = count = len(buf)
        else:
            ws = len(buf) - len(buf.lstrip())  # (bytes.strip's whitespace is _SPACE)
            end = buf.rfind(b"\n", 0, ws) + 1  # whole blank lines only
            if end == 0:
                break
            count = buf.count(b"\n", 0, end)
        lines += count
        nbytes += end
        s.read(end)
        if end < len(buf):
            break
    return first if lines == 1 else BlankRun(lines, nbytes)


def _skip_line(s, head: bytes, bound: int | None = None) -> int:
    """Read past the rest of the line ``head`` began, in bounded steps; return the bytes passed (``head`` included).
    ``bound``: read at most that many bytes (the line then ends beyond them, or there)."""
    n = len(head)
    if head.endswith(b"\n"):
        return n
    while bound is None or n < bound:
        more = s.readline(1 << 20 if bound is None else min(1 << 20, bound - n))
        n += len(more)
        if not more or more.endswith(b"\n"):
            return n
    return n


def _parse_chat(part: Part, fields: ChatFields) -> Iterator[Record]:
    """Conversations (packer/formats/chat.py) of ``part``, in order; a bad line is a Skip naming it."""
    sl = part.sl
    path_of = paths(fields)
    for line, line_no, start in lines_of(part):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            if not line.strip():
                continue
            reason = "invalid_utf8" if "UTF-8" in str(e) or "utf-8" in str(e) else "malformed_json"
            yield Skip(reason, where(sl, line_no, start))
            continue
        got = conversation_of(dict_getter(obj, path_of), fields) if type(obj) is dict else "not_conversation"
        if type(got) is str:
            yield Skip(got, where(sl, line_no, start))
        else:
            yield Conversation(got[0], got[1], lambda n=line_no, b=start: where(sl, n, b))


def lines_of(part: Part) -> Iterator[tuple[bytes, int | None, int]]:
    """(line, its line number or None, its first byte) for each line of ``part``, a leading
    byte-order mark dropped. (``Jsonl.parse``, the hot path, inlines this loop.)"""
    line_no, pos = part.line0, part.pos0
    for line in part.items:
        start = pos
        pos += len(line)
        if line_no is not None:
            line_no += 1
            if line_no == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
        yield line, line_no, start
        if type(line) is BlankRun:
            pos += line.nbytes - len(line)
            line_no = None if line_no is None else line_no + line.lines - 1
        elif type(line) is Spent:
            pos += line.nbytes - len(line)


def json_keys(raws, records: int) -> list[str]:
    """The field names of the first ``records`` JSON objects among ``raws`` (bytes; bad ones passed
    over): what a build that found no document names in its message."""
    def objs():
        for raw in raws:
            try:
                yield orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
    it = objs()
    try:
        return keys_of(it, records)
    finally:
        it.close()
        close = getattr(raws, "close", None)
        if close is not None:
            close()


def get_field(obj, path: tuple[str, ...]):
    """``obj[path[0]][path[1]]...``, or ``_MISSING`` where a step is absent or not an object."""
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def where(sl: Slice, line_no: int | None, byte: int) -> str:
    """"path:line" of the record starting at ``byte`` (counted from the file's start if not known)."""
    if line_no is not None:
        return f"{sl.file.path}:{line_no}"
    return f"{sl.file.path}:{_count_lines_before(sl.file.path, byte) + 1}"


def _count_lines_before(path: str, byte: int) -> int:
    """Line index of ``byte`` in a plain file; only called to name a bad record.

    A slice (or a worker's byte range, pipeline/engines/reader.py) that starts mid-file does not
    know its line numbers; counting from the file's start for each bad record of a 1 MB range late
    in a big file made a file with many bad records quadratic. So the counts found are kept per file
    (``_LINE_MARKS``, keyed by its stat: a rewrite is a new key) and the next count starts from the
    closest one before ``byte``."""
    key, marks = _marks(path)
    k = bisect.bisect_right(marks, (byte, 1 << 62)) - 1
    at, n = marks[k] if k >= 0 else (0, 0)
    left = byte - at
    with storage_for(path).stream() as fh:
        if at:
            fh.seek(at)  # (only a local file has marks)
        while left > 0:
            chunk = fh.read(min(left, 8 << 20))
            if not chunk:
                break
            n += chunk.count(b"\n")
            left -= len(chunk)
    if key is not None and len(marks) < MAX_MARKS:
        bisect.insort(marks, (byte, n))
    return n


_LINE_MARKS: dict = {}  # (path, size, mtime_ns, inode, ctime_ns) -> sorted [(byte, lines before it)]
MAX_MARKS = 1 << 14  # per file; and at most 64 files are remembered


def _marks(path: str):
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # an object in a store: no stat, nothing kept
        return None, []
    key = (path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    if key not in _LINE_MARKS and len(_LINE_MARKS) >= 64:
        _LINE_MARKS.clear()
    return key, _LINE_MARKS.setdefault(key, [])


FORMAT = Jsonl()
