"""JSON (.json, also .gz, .zst, .bz2, .xz): one JSON array of records, streamed; or JSON Lines named .json.

A file whose first value is an object that ends on its first line is JSON
Lines under another name, and is read (and cut into byte ranges) exactly as
a .jsonl. Otherwise the file is one array: it is cut into the raw bytes of
each element as it streams (``split_array``: a regex jumps from one
structural character to the next, and a string is skipped by ``bytes.find``
of its closing quote),
and each element is parsed on its own, on the core that tokenizes it. So a
bad element (invalid UTF-8, malformed) is one skipped record at its
``file:line``, and the rest of the array is kept; a cut-off array keeps the
elements before the cut and counts one ``truncated``. Memory holds the
element being read and one read block, never the whole file (unless the file
is a single value that is not an array: that is one record).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterator

import orjson

from ..io import COMPRESSION_SUFFIXES, open_stream, storage_for, truncation_errors
from . import jsonl
from .base import DEFAULT_MAX_RECORD, Document, Format, InputFile, Part, Record, Skip, Slice, unreadable
from .jsonl import json_keys

BLOCK = 1 << 20  # bytes read at a time (doubling while one element is longer)
PEEK = 64 << 10  # bytes read to tell an array from JSON Lines

_SCAN = re.compile(rb'["\[\]{},]')  # the structural characters that matter outside strings
_WS = re.compile(rb"[ \t\r\n]*")


class Json(Format):
    name = "json"
    suffixes = {".json" + z: comp for z, comp in {"": None, **COMPRESSION_SUFFIXES}.items()}

    def plan(self, f: InputFile, target_bytes: int) -> list[tuple[Slice, int]]:
        if is_json_lines(f):
            return jsonl.FORMAT.plan(replace(f, format="jsonl"), target_bytes)
        return [(Slice(f, 0, f.size), f.size)]

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int,
              max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Part]:
        # An element over max_record bytes is a too_long Skip, as a .jsonl line is; unlike a .jsonl
        # line it is still read whole first (the array splitter holds one element in memory).
        f = sl.file
        try:
            s = open_stream(f.path, f.compression, on_bytes=on_bytes)
        except OSError as e:
            yield Part(sl, [], tail=unreadable(sl, e))
            return
        items: list = []
        n_bytes = 0
        tail = None
        try:
            for el in split_array(s.read, f.path):
                if type(el) is Skip:
                    tail = el
                    break
                if len(el[1]) > max_record:
                    items.append((el[0], Skip("too_long", f"{f.path}:{el[0]} (over --max-record-mb "
                                                          f"{max_record / (1 << 20):g})")))
                    continue
                items.append(el)
                n_bytes += len(el[1])
                if n_bytes >= part_bytes:
                    yield Part(sl, items, nbytes=n_bytes)
                    items, n_bytes = [], 0
        except truncation_errors(f.compression):
            tail = Skip("truncated", f"{f.path}: the compressed stream is cut or corrupt")
        except OSError as e:
            tail = unreadable(sl, e)
        finally:
            s.close()
        if items or tail is not None:
            yield Part(sl, items, tail=tail, nbytes=n_bytes)

    def fields(self, sl: Slice, records: int = 50) -> list[str] | None:
        return json_keys((raw for part in self.parts(sl, "", None, 64 << 10) for _, raw in part.items
                          if type(raw) is not Skip), records)

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        path = part.sl.file.path
        for line, raw in part.items:
            if type(raw) is Skip:  # over --max-record-mb, found while splitting
                yield raw
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                reason = "invalid_utf8" if "utf-8" in str(e).lower() else "malformed_json"
                yield Skip(reason, f"{path}:{line}")
                continue
            text = jsonl.get_field(obj, field)
            if type(text) is str and text:
                yield Document(text)
            elif text is jsonl._MISSING:
                yield Skip("missing_field", f"{path}:{line}")
            elif not isinstance(text, str):
                yield Skip("not_string", f"{path}:{line}")
            else:
                yield Skip("empty", f"{path}:{line}")


def is_json_lines(f: InputFile) -> bool:
    """Whether ``f`` starts with a JSON object that ends on its first line (JSON Lines named .json)."""
    try:
        if f.compression is None:
            # One small read: planning a tree of many .json files must not start a read-ahead per file.
            r = storage_for(f.path).ranged()
            try:
                head = r.pread(min(PEEK, f.size), 0) if f.size else b""
            finally:
                r.close()
        else:
            with open_stream(f.path, f.compression) as s:
                head = s.read(PEEK)
    except (OSError, *truncation_errors(f.compression)):
        return False  # the array reader reports the file
    head = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    head = head.lstrip()
    if not head.startswith(b"{"):
        return False
    first = head.split(b"\n", 1)[0]
    try:
        return type(orjson.loads(first)) is dict
    except orjson.JSONDecodeError:
        return False


def split_array(read, path: str, block: int = BLOCK) -> Iterator[tuple[int, bytes] | Skip]:
    """The elements of the top-level JSON array read through ``read(n)``, as
    (line of the element's first byte, its raw bytes), in order; a cut-off
    array ends with a ``Skip("truncated")``. Raises what ``read`` raises.
    A file that is not an array is one element (the whole value)."""
    st = _Buf(read, block)
    i = st.skip_ws(0, first=True)
    if i is None:
        return  # empty file: no records
    if st.buf[i:i + 1] != b"[":
        line = st.line_at(i)
        while st.grow(i) >= 0:  # not an array: the whole value is one record
            i = 0
        yield line, st.buf[i:]
        return
    i += 1
    while True:
        i = st.skip_ws(i)
        if i is None:
            yield Skip("truncated", f"{path}:{st.line_at(len(st.buf))} (the JSON array is cut off)")
            return
        if st.buf[i:i + 1] == b"]":
            return
        start, j, depth = i, i, 0
        while True:
            m = _SCAN.search(st.buf, j)
            ch = m.group() if m else None
            if ch == b'"':
                end = string_end(st.buf, m.end())
                if end >= 0:
                    j = end
                    continue
                j = m.start()  # the string goes on past the buffer: read more, rescan it
            elif ch in (b"[", b"{"):
                depth += 1
                j = m.end()
                continue
            elif ch in (b"]", b"}") and depth > 0:
                depth -= 1
                j = m.end()
                continue
            elif ch == b"," and depth > 0:
                j = m.end()
                continue
            elif ch in (b",", b"]"):  # at depth 0: the element ends here
                yield st.line_at(start), st.buf[start:m.start()]
                if ch == b"]":
                    return
                i = m.end()
                break
            elif ch == b"}":  # unbalanced: part of a malformed element
                j = m.end()
                continue
            else:
                j = len(st.buf)
            shift = st.grow(start)
            if shift < 0:
                yield Skip("truncated", f"{path}:{st.line_at(start)} (the JSON array is cut off)")
                return
            start, j = start - shift, j - shift


def string_end(buf: bytes, start: int) -> int:
    """The position just after the closing quote of the JSON string whose text
    begins at ``start`` (just after its opening quote); -1 if it does not end in ``buf``.

    ``bytes.find`` runs at memchr speed over the text; a quote preceded by an
    odd run of backslashes is escaped, and the search goes on after it. (A
    regex over the string ran at 30-50 MB/s; this is the reader's hot loop.)
    """
    i = start
    while True:
        q = buf.find(b'"', i)
        if q < 0:
            return -1
        k = q - 1
        while k >= start and buf[k] == 0x5C:  # backslash
            k -= 1
        if (q - 1 - k) % 2 == 0:
            return q + 1
        i = q + 1


class _Buf:
    """A window on the stream: ``buf`` from the earliest byte still needed, line numbers counted once."""

    def __init__(self, read, block: int):
        self.read, self.block = read, block
        self.buf = b""
        self.cpos, self.cline = 0, 1  # buf[cpos] is on line cline
        self.eof = False

    def grow(self, keep: int) -> int:
        """Drop buf[:keep] and read more; returns the bytes dropped, or -1 at the end of the stream."""
        if self.eof:
            return -1
        chunk = self.read(max(self.block, len(self.buf)))  # doubling: one long element costs O(its size)
        if not chunk:
            self.eof = True
            return -1
        self.line_at(keep)
        self.buf = self.buf[keep:] + chunk
        self.cpos -= keep
        return keep

    def line_at(self, pos: int) -> int:
        """The line of buf[pos] (pos never before an earlier call's)."""
        if pos > self.cpos:
            self.cline += self.buf.count(b"\n", self.cpos, pos)
            self.cpos = pos
        return self.cline

    def skip_ws(self, i: int, first: bool = False) -> int | None:
        """The position of the next non-space byte at or after ``i`` (reading more as needed); None at the end."""
        while True:
            if first and i == 0 and self.buf.startswith(b"\xef\xbb\xbf"):
                i = 3  # a byte-order mark is encoding, not text
            i = _WS.match(self.buf, i).end()
            if i < len(self.buf):
                return i
            shift = self.grow(i)
            if shift < 0:
                return None
            i -= shift


FORMAT = Json()
