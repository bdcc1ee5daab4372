"""Cutting a stream of JSON into the raw bytes of its records, bounded, without parsing it.

A .json file is read as a sequence of top-level values with whitespace
between them (one array, as usual; or several, as ``cat a.json b.json``
makes; or objects back to back): each element of an array is one record, and
so is each top-level object or string. ``split_array`` finds where each
record starts and ends: a regex jumps from one structural character to the
next, and a string is skipped by ``bytes.find`` of its closing quote. The
records are then parsed one by one, on the core that tokenizes them.

Memory holds the record being cut and one read block. A record longer than
``max_record`` is let go as it is scanned (the scanner keeps only its depth
and whether it is inside a string), so one 1 GiB element costs a few read
blocks, not 2 GB. Text at the top level that starts no JSON value (a log line
after the closing ``]``) is one counted record up to the next line that
starts with ``[``, ``{`` or ``"``.
"""

from __future__ import annotations

import re
from typing import Iterator

from .base import Skip

BLOCK = 1 << 20  # bytes read at a time (doubling while one record is longer, up to its limit)

_SCAN = re.compile(rb'["\[\]{},]')  # the structural characters that matter outside strings
_WS = re.compile(rb"[ \t\r\n]*")
_QUOTE, _OPEN_A, _CLOSE_A, _OPEN_O, _CLOSE_O, _COMMA, _BACKSLASH = b'"[]{},\\'


def split_array(read, path: str, block: int = BLOCK,
                max_record: int | None = None) -> Iterator[tuple[int, bytes | Skip] | Skip]:
    """The records of the JSON values read through ``read(n)``, in order: (line of the record's
    first byte, its raw bytes), or (line, Skip) for one skipped as it was cut (``too_long``: over
    ``max_record`` bytes; ``malformed_json``: text that is not JSON, or a value that never ends);
    a cut-off array ends the stream with a bare ``Skip("truncated")``. Raises what ``read`` raises."""
    st = _Buf(read, block)
    i = st.skip_ws(0, first=True)
    while i is not None:
        c = st.buf[i]
        line = st.line_at(i)
        if c == _OPEN_A:
            i = yield from _elements(st, i + 1, path, max_record)
        elif c in (_OPEN_O, _QUOTE):
            got = _scan(st, i, True, max_record)
            if got is None:
                yield line, Skip("malformed_json", f"{path}:{line} (a JSON value that the file ends inside)")
                return
            start, i, whole = got
            yield line, st.buf[start:i] if whole else _too_long(path, line, max_record)
        else:
            i = _garbage(st, i)
            yield line, Skip("malformed_json", f"{path}:{line} (text that is not JSON, "
                                               f"{'after' if i is None else 'between'} the JSON values)")
        if i is None:
            return
        i = st.skip_ws(i)


def _too_long(path: str, line: int, max_record: int) -> Skip:
    return Skip("too_long", f"{path}:{line} (over --max-record-mb {max_record / (1 << 20):g})")


def _elements(st: "_Buf", i: int, path: str, max_record: int | None):
    """Yield the elements of the array whose ``[`` is just before buf[i]; return the position
    after its ``]``, or None at the end of the stream (a cut array: a ``truncated`` Skip yielded)."""
    while True:
        i = st.skip_ws(i)
        if i is None:
            yield Skip("truncated", f"{path}:{st.line_at(len(st.buf))} (the JSON array is cut off)")
            return None
        if st.buf[i] == _CLOSE_A:
            return i + 1
        line = st.line_at(i)
        got = _scan(st, i, False, max_record)
        if got is None:
            yield Skip("truncated", f"{path}:{line} (the JSON array is cut off)")
            return None
        start, end, whole = got
        yield line, st.buf[start:end] if whole else _too_long(path, line, max_record)
        if st.buf[end] == _CLOSE_A:
            return end + 1
        i = end + 1


def _scan(st: "_Buf", i: int, top: bool, limit: int | None) -> tuple[int, int, bool] | None:
    """Where the value starting at buf[i] ends: (start, end, whole) in buf's coordinates after the
    reads this took. In an array (``top`` False) a value ends before a ``,`` or ``]`` at depth 0;
    at the top level (buf[i] is ``{`` or ``"``) just after what closes it. ``whole`` is False when
    the value grew past ``limit`` bytes and was let go as it was scanned (then buf[start:end] is
    not it). None if the stream ends first."""
    buf = st.buf
    start, j, depth, in_str, whole = i, i, 0, False, True
    while True:
        if in_str:
            end = string_end(buf, j)
            if end >= 0:
                j, in_str = end, False
                if top and depth == 0:
                    return start, j, whole
                continue
            resumed, j = j, len(buf)
            while j > resumed and buf[j - 1] == _BACKSLASH:
                j -= 1  # a run of backslashes at the end is kept: it may escape the next byte
        else:
            m = _SCAN.search(buf, j)
            if m is not None:
                ch, j = buf[m.start()], m.end()
                if ch == _QUOTE:
                    in_str = True
                elif ch == _OPEN_A or ch == _OPEN_O:
                    depth += 1
                elif depth > 0 and (ch == _CLOSE_A or ch == _CLOSE_O):
                    depth -= 1
                    if top and depth == 0:
                        return start, j, whole
                elif depth == 0 and (ch == _COMMA or ch == _CLOSE_A):
                    return start, m.start(), whole  # an array's element ends here
                continue  # (a '}' at depth 0 is part of a malformed element)
            j = len(buf)
        if whole and limit is not None and len(buf) - start > limit:
            whole = False  # too long to keep: from here on only its end is looked for
        shift = st.grow(start if whole else j, limit)
        if shift < 0:
            return None
        buf = st.buf
        start, j = start - shift, j - shift


def _garbage(st: "_Buf", i: int) -> int | None:
    """The position just past top-level text that is not JSON, starting at buf[i]: the first byte
    of the next line that starts (after spaces) with ``[``, ``{`` or ``"``; None at the end of the
    stream. Read in blocks and let go as it is passed."""
    j, fresh = i, False  # fresh: at a line start, or after only spaces on it
    while True:
        buf = st.buf
        while j < len(buf):
            if fresh:
                j = _WS.match(buf, j).end()
                if j < len(buf):
                    if buf[j] in (_OPEN_A, _OPEN_O, _QUOTE):
                        return j
                    fresh = False
            else:
                n = buf.find(b"\n", j)
                j, fresh = (len(buf), False) if n < 0 else (n + 1, True)
        shift = st.grow(j)
        if shift < 0:
            return None
        j -= shift


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

    def grow(self, keep: int, limit: int | None = None) -> int:
        """Drop buf[:keep] and read more; returns the bytes dropped, or -1 at the end of the stream.
        Reads double with what is kept (one long record costs O(its size)), up to ``limit``."""
        if self.eof:
            return -1
        n = max(self.block, len(self.buf) - keep)
        chunk = self.read(n if limit is None else min(n, max(self.block, limit)))
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
