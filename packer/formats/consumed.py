"""What a unit read of each input: the byte ranges of a slice, and their xxh3-64 (``--resume`` compares it).

A unit record keeps, per slice, the hash of the bytes its reader consumed
(``consumed``), so that ``--resume`` can tell a same-size edit anywhere in a
finished unit's input, also one outside the three blocks of the input stamp
(packer/io/stamp.py) with its modification time put back. The ranges:

- plain jsonl cut into byte ranges: from byte ``start - 1`` (the reader looks
  at it to find the first line) through the end of the line holding byte
  ``end - 1`` (a line belongs to the slice holding its first byte, and is read whole);
- parquet row groups ``[start, end)``: their column chunks (first page to last
  byte) and the footer that describes them;
- anything else (a whole file: text, compressed, JSON arrays, Arrow): the file.

Local inputs only: an object's stamp is its ETag, a hash of all of its bytes
already. The bytes are read again as the unit is written (they are in the
page cache then; xxh3 runs at memory speed), not as the tokenizer read them:
a same-size edit with the time put back in the seconds between the two reads
is not seen here (a slower one is ``truncated`` by the stamp check of ``changed``).
"""

from __future__ import annotations

import os

from ..io import storage_for

BLOCK = 1 << 20  # bytes per read while hashing (its page faults and allocation were half the CPU at 8 MB a new bytes)


def ranges(sl) -> list[tuple[int, int]]:
    """The byte ranges ``[a, b)`` of ``sl``'s file that reading ``sl`` consumes (see the module docstring)."""
    f = sl.file
    if f.format == "jsonl" and f.compression is None and (sl.start > 0 or sl.end < f.size):
        return [(max(sl.start - 1, 0), _line_end(f.path, sl.end, f.size))]
    if f.format == "parquet":
        return _row_groups(f.path, sl.start, sl.end, f.size)
    return [(0, f.size)]


def digest(sl) -> str | None:
    """The xxh3-64 (hex) of ``ranges(sl)`` of the file as it is now; None for an input that is not local,
    "" for one that cannot be read."""
    import xxhash

    if storage_for(sl.file.path).stamp_covers_content:
        return None
    h = xxhash.xxh3_64()
    try:
        fd = os.open(sl.file.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    buf = memoryview(bytearray(BLOCK))  # one buffer, read into again: a new 8 MB bytes a read was 2.2x the CPU
    try:
        for a, b in ranges(sl):
            h.update(f"{a}:{b};".encode())
            while a < b:
                n = _read_into(fd, buf[: min(BLOCK, b - a)], a)
                if not n:
                    return ""  # shorter than it was: another file
                h.update(buf[:n])
                a += n
    except (OSError, ValueError):
        return ""
    finally:
        os.close(fd)
    return h.hexdigest()


def _read_into(fd: int, view: memoryview, at: int) -> int:
    """Bytes of ``fd`` from ``at`` into ``view``; how many (0 at the end). preadv where there is one (POSIX)."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], at)
    data = os.pread(fd, len(view), at)
    view[: len(data)] = data
    return len(data)


def _line_end(path: str, end: int, size: int) -> int:
    """One past the first newline at or after byte ``end - 1`` (the file's size if there is none)."""
    with open(path, "rb") as fh:
        fh.seek(end - 1)
        at = end - 1
        while at < size:
            block = fh.read(1 << 16)
            if not block:
                break
            nl = block.find(b"\n")
            if nl >= 0:
                return at + nl + 1
            at += len(block)
    return size


def _row_groups(path: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    import pyarrow.parquet as pq

    try:
        md = pq.ParquetFile(path).metadata
        lo, hi = size, 0
        for g in range(start, min(end, md.num_row_groups)):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                first = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
                lo, hi = min(lo, first), max(hi, first + col.total_compressed_size)
        with open(path, "rb") as fh:
            fh.seek(size - 8)
            footer = 8 + int.from_bytes(fh.read(4), "little")
    except (OSError, ValueError, TypeError):  # (pyarrow's ArrowInvalid is a ValueError)
        return [(0, size)]
    return ([(lo, hi)] if lo < hi else []) + [(max(size - footer, 0), size)]
