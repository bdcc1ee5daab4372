"""Formats: find input files, cut them into slices, read them into records.

Stage 1 of the pipeline. ``discover`` turns the user's paths (folders, files,
globs, object-store prefixes) into a sorted list of ``InputFile``;
``plan_slices`` cuts those into ``Slice``s of bounded size; ``iter_parts``
reads a slice into ``Part``s (I/O and decompression: cheap, in order, with
read-ahead) and ``parse_part`` turns a Part into ``Record``s (JSON and UTF-8
decoding: per record, on the core that then tokenizes them).

Each input format is one module here, listed in ``REGISTRY``: adding one
(.csv, say) is a new module with a ``Format`` subclass and a line below.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

from ..errors import PackerError
from ..io import find, io_thread
from . import arrow, json_array, jsonl, parquet, plain, text
from .base import (DEFAULT_MAX_RECORD, PART_BYTES, SKIP_REASONS, Document, Format, InputFile, Part, Record, Skip, Slice,
                   strict_error)
from .layouts import ignored_reasons, metadata_files, packer_build
from .chat import ChatFields, Conversation
from .consumed import digest as consumed_digest

__all__ = [
    "REGISTRY", "FORMATS", "no_inputs_error", "PART_BYTES", "DEFAULT_MAX_RECORD", "SKIP_REASONS", "Document", "Format",
    "InputFile", "Part", "Record", "Skip", "Slice", "Discovery", "detect_format", "discover", "plan_slices", "iter_parts",
    "parse_part", "read_slice", "iter_parts_many", "record_fields", "strict_error", "where_of_document",
    "where_of_record", "let_go",
    "ChatFields", "Conversation", "consumed_digest",
]

REGISTRY: dict[str, Format] = {m.FORMAT.name: m.FORMAT for m in (text, jsonl, parquet, json_array, arrow, plain)}

# File-name ending -> (format, compression). Longest suffix wins.
FORMATS = {suffix: (f.name, comp) for f in REGISTRY.values() for suffix, comp in f.suffixes.items()}
_BY_LENGTH = sorted(FORMATS, key=len, reverse=True)

PREFETCH_FILES = 32  # whole files (text) read at once, ahead of the parser
PREFETCH_BYTES = 64 << 20  # ... and at most about this many bytes of them


def detect_format(path: str, every_text: bool = False, text_suffixes: tuple[str, ...] = ()) -> tuple[str, str | None] | None:
    """(format, compression) of ``path`` by its name, or None. ``every_text`` (--format text): every file is
    one text document (.txt/.md, compressed too, as always; any other file as ``plain``); ``text_suffixes``
    (--text-extensions .py,.rs): files with these endings are read as text (``plain``) too."""
    name = path.lower()
    found = next((FORMATS[s] for s in _BY_LENGTH if name.endswith(s)), None)
    if found is not None and found[0] == "text":
        return found
    if every_text or (text_suffixes and name.endswith(text_suffixes)):
        return plain.FORMAT.name, None
    return found


UNSUPPORTED = "unsupported type"


@dataclass(frozen=True)
class Discovery:
    files: tuple[InputFile, ...]
    ignored: tuple[str, ...]  # files inside folders that are not read: unsupported type, or a dataset's metadata
    duplicates: tuple[str, ...]  # paths given more than once (read once)
    special: tuple[str, ...] = ()  # FIFOs, sockets, devices with an input's name: not read
    why: tuple[tuple[str, str], ...] = ()  # (path, reason) for each ignored file that is not UNSUPPORTED

    def ignored_lines(self, examples: int = 2) -> list[str]:
        """One phrase per reason files were ignored: "3 of unsupported type (.csv x2, .pdf; e.g. a/x.csv)"."""
        why = dict(self.why)
        groups: dict[str, list[str]] = {}
        for p in self.ignored:
            groups.setdefault(why.get(p, UNSUPPORTED), []).append(p)
        out = []
        for reason, paths in groups.items():
            what = hint = ""
            if reason == UNSUPPORTED:
                exts: dict[str, int] = {}
                for p in paths:
                    exts[_ext(p)] = exts.get(_ext(p), 0) + 1
                top = sorted(exts.items(), key=lambda kv: (-kv[1], kv[0]))
                what = " (" + ", ".join(f"{e} x{n}" if n > 1 else e for e, n in top[:6]) + (", ..." if len(top) > 6 else "") + ")"
                hint = "; to read them as text: --format text" + next(
                    (f", or --text-extensions {e}" for e, _ in top if e != "(no extension)"), "")
            out.append(f"{len(paths)} {'file' if len(paths) == 1 else 'files'}: {reason}{what}, e.g. "
                       + ", ".join(paths[:examples]) + hint)
        return out


def _ext(path: str) -> str:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return "." + name.split(".", 1)[1] if "." in name.lstrip(".") else "(no extension)"


def supported_formats() -> str:
    """The formats read, in one line: "text (.txt .md), jsonl (.jsonl .ndjson), ...; .gz .zst .bz2 .xz of text, jsonl, json"."""
    named, packed = [], []
    for f in (f for f in REGISTRY.values() if f.suffixes):  # (plain: chosen by --format text, not by a name)
        named.append(f"{f.name} ({' '.join(s for s, c in f.suffixes.items() if c is None)})")
        if any(c is not None for c in f.suffixes.values()):
            packed.append(f.name)
    comps = sorted({s.rsplit(".", 1)[1] for f in REGISTRY.values() for s, c in f.suffixes.items() if c is not None})
    return (", ".join(named) + f"; each of {', '.join(packed)} also compressed (.{' .'.join(comps)}); any file as "
            "text with --format text or --text-extensions")


def no_inputs_error(inputs, found: Discovery) -> PackerError:
    """The error for a build that found nothing to read: what it did find, and what it reads."""
    where = ", ".join(inputs)
    supported = "supported: " + supported_formats()
    if not found.ignored:
        return PackerError(f"no input files found in {where} (it holds no files); {supported}")
    return PackerError(f"no input files found in {where}: ignored {'; '.join(found.ignored_lines())}; {supported}")


def packer_build_error(built: tuple[str, str], inputs) -> PackerError:
    """The error for an input that is (or holds) a packer build: its shards are tokens, not text."""
    folder, name = built
    norm = {p: p.rstrip("/" + os.sep).replace(os.sep, "/") for p in inputs}
    given = next((p for p, n in norm.items() if n == folder), None)
    holder = next((p for p, n in norm.items() if folder.startswith(n + "/")), None)
    where = given or folder
    inside = f" (inside input {holder})" if holder and not given else ""
    if name == "build.json":
        return PackerError(f"{where} is an unfinished packer build ({name}){inside}: its shards are tokens, not text; "
                           "leave it out of the inputs")
    return PackerError(f"{where} is a packer build ({name}){inside}: to pack it at another length use "
                       f"`packer repack {where} OUT --seq-len N`; or leave it out of the inputs")


def discover(paths: list[str], exclude: str | None = None, on_sized=None, every_text: bool = False,
             text_suffixes: tuple[str, ...] = ()) -> Discovery:
    """Expand folders (recursively, sorted), files, globs and URIs into input files.

    ``exclude`` is a folder never read from (the output folder, when it sits
    inside an input folder). Raises ``PackerError`` for a missing input or an
    explicitly named file of unknown format. ``on_sized(done, total)``, if
    given, is called as the files found are sized. ``every_text``, ``text_suffixes``: see ``detect_format``.
    """
    def unknown(p: str) -> PackerError:
        return PackerError(f"unknown input format: {p} (supported: {supported_formats()})")

    def detect(p: str):
        return detect_format(p, every_text, text_suffixes)

    found = find(list(paths), lambda p: detect(p) is not None, unknown, exclude, on_sized)
    files = [InputFile(p, *detect(p), size, stamp) for (p, size), stamp in zip(found.files, found.stamps)]
    built = packer_build([f.path for f in files])
    if built is not None:
        raise packer_build_error(built, paths)
    meta = metadata_files([f.path for f in files], [f.format for f in files])
    if meta:
        files = [f for f in files if f.path not in meta]
    why = {**ignored_reasons(found.ignored), **meta}
    return Discovery(tuple(files), found.ignored + tuple(meta), found.duplicates, found.special, tuple(why.items()))


def plan_slices(files: tuple[InputFile, ...], target_bytes: int) -> list[tuple[Slice, int]]:
    """Cut files into (slice, weight_bytes) pieces of at most ~target_bytes.

    Deterministic in the files and target alone, so a resumed build plans the
    same units. Compressed files cannot be split and stay whole.
    """
    return [piece for f in files for piece in REGISTRY[f.format].plan(f, target_bytes)]


def iter_parts(sl: Slice, text_field: str = "text", on_bytes=None, part_bytes: int | None = None,
               max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Part]:
    """Read ``sl`` into Parts of whole records (about ``part_bytes``, default
    PART_BYTES), in order. Never raises OSError: a read error ends the slice
    with a ``tail`` Skip("unreadable"); a record over ``max_record`` bytes is a Skip("too_long")."""
    parts = REGISTRY[sl.file.format].parts(sl, text_field, on_bytes, part_bytes or PART_BYTES, max_record)
    return parts if sl.max_items is None else _capped(parts, sl.max_items)


def _capped(parts: Iterator[Part], max_items: int) -> Iterator[Part]:
    """The Parts of a slice up to its first ``max_items`` raw items (``--limit``); the rest is not read."""
    left = max_items
    try:
        for part in parts:
            k, seen = 0, 0
            for item in part.items:  # a run of blank lines (jsonl's BlankRun) counts as the lines it holds
                seen += getattr(item, "lines", 1)
                k += 1
                if seen >= left:
                    break
            if seen >= left:
                cut = part.items[:k]
                nbytes = part.nbytes * len(cut) // max(1, len(part.items))
                yield Part(part.sl, cut, part.line0, part.pos0, part.tail if len(cut) == len(part.items) else None, nbytes)
                return
            left -= seen
            yield part
    finally:
        close = getattr(parts, "close", None)
        if close is not None:
            close()


def parse_part(part: Part, field: tuple[str, ...]) -> Iterator[Record]:
    """Yield the records of ``part`` in order: Documents, or Skips naming where and why."""
    yield from REGISTRY[part.sl.file.format].parse(part, field)
    if part.tail is not None:
        yield part.tail


def where_of_record(part: Part, record: int) -> str:
    """Where record number ``record`` (0-based, as ``parse_part`` gave them, Skips too) of ``part`` is."""
    return REGISTRY[part.sl.file.format].where_of(part, record)


def let_go(part: Part) -> None:
    """Drop, in place, the raw bytes of ``part``'s huge records, once parsed (``Format.let_go``)."""
    REGISTRY[part.sl.file.format].let_go(part)


def where_of_document(part: Part, field: tuple[str, ...], k: int) -> str:
    """Where the ``k``-th Document (0-based, Skips not counted) of ``part`` is: "path:line" for jsonl.
    Re-parses the part; meant for the few documents named as examples."""
    docs = 0
    for r, rec in enumerate(REGISTRY[part.sl.file.format].parse(part, field)):
        if type(rec) is Document:
            if docs == k:
                return REGISTRY[part.sl.file.format].where_of(part, r)
            docs += 1
    return part.sl.file.path


def record_fields(slices, max_files: int = 8) -> dict[str, list[str]]:
    """{path: field names its first records have} for the first ``max_files``
    files among ``slices`` that have fields (for the message when a build found
    no document); a file that cannot be read is left out."""
    out: dict[str, list[str]] = {}
    for sl in slices:
        if len(out) >= max_files or sl.file.path in out:
            continue
        try:
            names = REGISTRY[sl.file.format].fields(sl)
        except Exception:  # only a hint: the build reports a broken input itself
            continue
        if names is not None:
            out[sl.file.path] = names
    return out


def read_slice(sl: Slice, text_field: str = "text", on_bytes=None,
               max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Record]:
    """Yield each record of ``sl`` in order. ``text_field`` may be a dotted
    path ("meta.text") into nested JSON objects."""
    field = tuple(text_field.split("."))
    for part in iter_parts(sl, text_field, on_bytes, max_record=max_record):
        yield from parse_part(part, field)


def iter_parts_many(slices, text_field: str = "text", on_bytes=None, prefetch: int = PREFETCH_FILES,
                    max_record: int = DEFAULT_MAX_RECORD):
    """``iter_parts`` over a sequence of (key, slice), in order; yields (key, Part).

    A ``None`` slice is passed through as (key, None), a marker for the
    caller. Whole-file slices (text files) are read ``prefetch`` at a time by
    a thread pool, so a tree of many small files on slow storage does not pay
    one round trip per file in series.
    """
    pool = ThreadPoolExecutor(prefetch, thread_name_prefix="packer-prefetch", initializer=io_thread)
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
                whole = sl is not None and REGISTRY[sl.file.format].whole_file
                fut = pool.submit(text.read_whole, sl, on_bytes, max_record) if whole else None
                ahead.append((key, sl, fut))
                if fut is None and sl is not None:
                    break  # a streamed slice reads ahead by itself
            if not ahead:
                return
            key, sl, fut = ahead.popleft()
            if sl is None:
                yield key, None
            elif fut is not None:
                yield key, next(_capped(iter([fut.result()]), sl.max_items)) if sl.max_items is not None else fut.result()
            else:
                for part in iter_parts(sl, text_field, on_bytes, max_record=max_record):
                    yield key, part
    finally:
        for a in ahead:
            if a[2] is not None:
                a[2].cancel()
        pool.shutdown(wait=True)
