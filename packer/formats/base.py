"""The values that flow from the format readers to the work unit, and the Format protocol.

An ``InputFile`` is cut into ``Slice``s (the input side of a work unit); a
slice is read into ``Part``s (raw records, about ``PART_BYTES`` of them: the
grain of parallelism) by one thread, in order; a ``Part`` is parsed into
``Record``s on whichever core then tokenizes them. A record is a
``Document`` (the text, and optionally more about it) or a ``Skip`` (why a
record was dropped, and where).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple, Union

from ..errors import InputError

PART_BYTES = 256 << 10  # raw input per Part and per chunk: a tokenizer batch, ~0.1-0.2 s of one core


@dataclass(frozen=True)
class InputFile:
    path: str  # as discovered (relative paths stay relative; a URI for an object)
    format: str  # a name in the format registry: "text" | "jsonl" | "parquet"
    compression: str | None  # "gzip" | "zstd" | None
    size: int  # bytes on disk


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
    "malformed_json": "a jsonl line that does not parse as a JSON object",
    "missing_field": "the text field is absent from the record",
    "not_string": "the text field holds something other than a string (or null)",
    "empty": "the text is the empty string",
    "truncated": "a compressed stream (or a JSON array or Arrow stream) ends early or is corrupt: records before the break are kept",
    "unreadable": "the file could not be read (vanished, permission, I/O error)",
    "no_tokens": "the text encodes to no tokens at all (only with --no-eos)",
}


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

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int) -> Iterator[Part]:
        """Read ``sl`` into Parts in order. Never raises OSError: a read error
        ends the slice with a ``tail`` Skip("unreadable")."""
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


def unreadable(sl: Slice, e: OSError) -> Skip:
    return Skip("unreadable", f"{sl.file.path}: {e.strerror or e}")


def strict_error(skip: Skip) -> InputError:
    return InputError(f"{skip.where}: {skip.reason} ({SKIP_REASONS[skip.reason]}); drop --strict to skip and count such records")
