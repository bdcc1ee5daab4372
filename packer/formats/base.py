"""The values that flow from the format readers to the work unit, and the Format protocol.

An ``InputFile`` is cut into ``Slice``s (the input side of a work unit); a
slice is read into ``Part``s (raw records, about ``PART_BYTES`` of them: the
grain of parallelism) by one thread, in order; a ``Part`` is parsed into
``Record``s on whichever core then tokenizes them. A record is a
``Document`` (the text, and optionally more about it) or a ``Skip`` (why a
record was dropped, and where).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Union

from ..errors import InputError
from ..io import storage_for

PART_BYTES = 256 << 10  # raw input per Part and per chunk: a tokenizer batch, ~0.1-0.2 s of one core
# The longest record (a jsonl line, a text file, a parquet cell) read, in
# bytes; a longer one is skipped and counted (``too_long``), so a reader's
# memory is bounded by this setting, not by the input. ``--max-record-mb``.
DEFAULT_MAX_RECORD = 256 << 20
LET_GO_BYTES = 1 << 20  # a raw record this big is dropped once parsed (Format.let_go)


@dataclass(frozen=True)
class InputFile:
    path: str  # as discovered (relative paths stay relative; a URI for an object)
    format: str  # a name in the format registry: "text" | "jsonl" | "parquet"
    compression: str | None  # "gzip" | "zstd" | None
    size: int  # bytes on disk
    # (modification time in ns, inode) when discovered; (0, 0) where unknown.
    # Not part of the plan (a copy of the corpus plans the same units); --resume compares it.
    stamp: tuple[int, int] = field(default=(0, 0), compare=False)


@dataclass(frozen=True)
class Slice:
    """Part of one input file. ``start``/``end`` are byte offsets for plain
    jsonl (records whose first byte lies in [start, end)), row-group indices
    for parquet, and 0/size for whole files (text, compressed jsonl)."""

    file: InputFile
    start: int
    end: int
    max_items: int | None = None  # --limit: read only the first this many raw items (lines, elements, rows)


class Document(NamedTuple):
    """One document read from the input: its text exactly as decoded (no
    stripping, no normalising), and per-document metadata where a format
    has any (None otherwise; not yet written to shards)."""

    text: str
    meta: dict | None = None


@dataclass(frozen=True)
class Skip:
    """A record that was not used; ``where`` is "path:line" (or "path", "path: row N")."""

    reason: str
    where: str


Record = Union[Document, Skip]

# Reasons a record is skipped, with what each means (shown by --help and docs).
SKIP_REASONS = {
    "invalid_utf8": "text is not valid UTF-8 (binary or wrongly encoded): skipped whole",
    "binary": "with --format text or --text-extensions: a binary file (a NUL byte in its first 8 KB): skipped whole",
    "malformed_json": "a jsonl line that does not parse as a JSON object",
    "missing_field": "the text field is absent from the record",
    "not_string": "the text field holds something other than a string (or null)",
    "empty": "the text is the empty string",
    "truncated": "a compressed stream (or a JSON array or Arrow stream) ends early or is corrupt, or the file changed "
                 "while it was read (shrank, grew or was rewritten): records before the break are kept",
    "unreadable": "the file could not be read (vanished, permission, I/O error)",
    "too_long": "one record (a line, a file, a cell) is longer than --max-record-mb: skipped whole",
    "not_regular": "a FIFO, socket or device in an input folder: never opened (it may block or never end)",
    "no_tokens": "the text encodes to no tokens at all (only with --no-eos)",
}
from .chat import CHAT_SKIP_REASONS  # noqa: E402  (chat builds: packer/formats/chat.py)

SKIP_REASONS.update(CHAT_SKIP_REASONS)


@dataclass(frozen=True)
class Part:
    """Records of one slice, read but not yet parsed; about ``PART_BYTES`` of them.
    What ``items`` holds is its format's business (jsonl: lines as bytes; text:
    the file's bytes; parquet: Records already)."""

    sl: Slice
    items: list
    line0: int | None = 0  # lines: lines of the file before items[0]; None where unknown (slice from mid-file)
    pos0: int = 0  # lines: byte offset of items[0] in the (decompressed) file
    tail: Skip | None = None  # a read error met after the last item: truncated stream, unreadable file
    nbytes: int = 0  # raw bytes in items


class Format:
    """One input format (one module under packer/formats/, listed in the registry).

    ``suffixes`` maps each file-name ending to its compression; ``whole_file``
    formats are read a file at a time, many files at once (``read_whole``).
    """

    name: str
    suffixes: dict[str, str | None]
    whole_file: bool = False

    def plan(self, f: InputFile, target_bytes: int) -> list[tuple[Slice, int]]:
        """Cut ``f`` into (slice, weight in bytes) of about ``target_bytes``; deterministic."""
        return [(Slice(f, 0, f.size), f.size)]

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int,
              max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Part]:
        """Read ``sl`` into Parts in order. Never raises OSError: a read error
        ends the slice with a ``tail`` Skip("unreadable"). A record over
        ``max_record`` bytes is a Skip("too_long")."""
        raise NotImplementedError

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        """The records of ``part`` in order (without its tail)."""
        raise NotImplementedError

    def fields(self, sl: Slice, records: int = 50) -> list[str] | None:
        """The field (or column) names the first ``records`` records of ``sl`` have,
        in order of first appearance; None for a format without fields. Used only
        to say what the records hold when no document was found."""
        return None

    def head(self, sl: Slice, chars: int) -> str | None:
        """The first ``chars`` characters of the slice's first document, where
        that is cheaper than reading a record (else None)."""
        return None

    # What ``locations`` gives: "line" (1-based line of the file), "row" (0-based row, counted from the
    # part's first record: the caller adds the rows before it, ``first_row``) or "byte" (offset in the file).
    location_kind = "byte"

    def locations(self, part: Part) -> list[int]:
        """Where each record of ``part`` (as ``parse`` gives them, Skips too) starts, as ``location_kind``
        says; for ``packer show --source``, which re-reads a unit's input. A whole-file format: [0]."""
        return [0]

    def first_row(self, sl: Slice) -> int:
        """Rows of the file before ``sl`` (a "row" format whose slices start mid-file)."""
        return 0

    def where_of(self, part: Part, record: int) -> str:
        """"path:line" (or the closest this format knows) of record number
        ``record`` (0-based, Documents and Skips alike) of ``part``. Called
        only to name an example, so it may re-read the part."""
        return part.sl.file.path

    def let_go(self, part: Part) -> None:
        """Drop, in place, what ``part`` holds of a parsed record of ``LET_GO_BYTES`` or more, keeping what
        ``where_of`` needs: once its text is a str, the raw bytes are one more copy of a huge record
        (docs/reliability.md). The part cannot be parsed again. Formats that hold nothing worth it: no-op."""


def changed(sl: Slice, now) -> Skip | None:
    """A ``truncated`` Skip if ``sl``'s file is not as discovered (``now``: its
    (size, mtime_ns, inode) after reading, or None); None if it is."""
    f = sl.file
    if now is None or f.stamp == (0, 0):
        return None
    size, mtime, _ = now
    if size != f.size or mtime != f.stamp[0]:
        what = f"{f.size:,} bytes when found, {size:,} after reading" if size != f.size else "rewritten"
        return Skip("truncated", f"{f.path}: the file changed while it was read ({what})")
    return None


def keys_of(objs, records: int) -> list[str]:
    """The keys of the dicts among the first ``records`` of ``objs`` (one level of nesting shown as a.b)."""
    seen: dict[str, None] = {}
    for i, obj in enumerate(objs):
        if i >= records:
            break
        if isinstance(obj, dict):
            for k, v in obj.items():
                seen[k] = None
                if isinstance(v, dict):
                    for k2 in v:
                        seen[f"{k}.{k2}"] = None
    return list(seen)


def grouped(sl: Slice, records: Iterator[Record], part_bytes: int, errors: tuple, tail_of) -> Iterator[Part]:
    """``records`` (already parsed, as a columnar reader yields them) in Parts of about
    ``part_bytes`` of text. An exception of ``errors`` ends the slice: the records before it are
    kept, and ``tail_of(exc)`` is the Skip that says why. A file that is not as discovered once
    read (``changed``: rewritten in place, or replaced) ends with a ``truncated`` Skip: its records
    may mix two versions, and are counted so."""
    items: list = []
    n_bytes = 0
    try:
        for rec in records:
            items.append(rec)
            if type(rec) is Document:
                n_bytes += len(rec.text)
                if n_bytes >= part_bytes:
                    yield Part(sl, items, nbytes=n_bytes)
                    items, n_bytes = [], 0
    except errors as e:
        yield Part(sl, items, tail=tail_of(e), nbytes=n_bytes)
        return
    # (no stamp, as for objects in a store: nothing to compare, and no request made)
    tail = changed(sl, storage_for(sl.file.path).stamp()) if sl.file.stamp != (0, 0) else None
    if items or tail is not None:
        yield Part(sl, items, tail=tail, nbytes=n_bytes)


def unreadable(sl: Slice, e: OSError) -> Skip:
    return Skip("unreadable", f"{sl.file.path}: {e.strerror or e}")


def broken_read(sl: Slice, e: Exception) -> Skip:
    """The Skip that ends a columnar slice at ``e``: ``unreadable`` for a real read error (an OSError
    with an errno); else ``truncated``: pyarrow reports a cut stream, a corrupt page or a file that
    is no longer what was planned (replaced by a rename) as an OSError without errno or ArrowInvalid."""
    if isinstance(e, OSError) and e.errno is not None:
        return unreadable(sl, e)
    return Skip("truncated", f"{sl.file.path}: {first_line(e)}")


def first_line(e: BaseException) -> str:
    """What ``e`` says, in one line (its type's name where it says nothing): for a Skip's where."""
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def strict_error(skip: Skip) -> InputError:
    return InputError(f"{skip.where}: {skip.reason} ({SKIP_REASONS[skip.reason]}); drop --strict to skip and count such records")
