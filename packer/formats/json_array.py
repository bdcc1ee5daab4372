"""JSON (.json, also .gz, .zst, .bz2, .xz): JSON arrays of records, streamed; or JSON Lines named .json.

A file whose first value is an object that ends on its first line is JSON
Lines under another name, and is read (and cut into byte ranges) exactly as
a .jsonl. Otherwise the file is one array, or several values back to back
(``cat a.json b.json``): it is cut into the raw bytes of each record as it
streams (``json_scan.split_array``), and each record is parsed on its own,
on the core that tokenizes it. So a bad element (invalid UTF-8, malformed)
is one skipped record at its ``file:line``, and the rest is kept; a cut-off
array keeps the elements before the cut and counts one ``truncated``; text
after (or between) the values is a counted ``malformed_json`` at its line.
Memory holds the record being read (at most ``--max-record-mb``: a longer
one is let go as it is scanned) and a read block, never the whole file.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

import orjson

from ..io import COMPRESSION_SUFFIXES, open_stream, storage_for, truncation_errors
from . import jsonl
from .base import DEFAULT_MAX_RECORD, Document, Format, InputFile, Part, Record, Skip, Slice, unreadable
from .json_scan import split_array, string_end
from .jsonl import json_keys

__all__ = ["FORMAT", "Json", "is_json_lines", "split_array", "string_end"]

PEEK = 64 << 10  # bytes read to tell an array from JSON Lines


class Json(Format):
    name = "json"
    suffixes = {".json" + z: comp for z, comp in {"": None, **COMPRESSION_SUFFIXES}.items()}

    def plan(self, f: InputFile, target_bytes: int) -> list[tuple[Slice, int]]:
        if is_json_lines(f):
            return jsonl.FORMAT.plan(replace(f, format="jsonl"), target_bytes)
        return [(Slice(f, 0, f.size), f.size)]

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int,
              max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Part]:
        # An element over max_record bytes is a too_long Skip, as a .jsonl line is: let go as it is
        # scanned, so memory holds max_record and a read block, whatever the element's size.
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
            for el in split_array(s.read, f.path, max_record=max_record):
                if type(el) is Skip:
                    tail = el
                    break
                if type(el[1]) is Skip:  # skipped while splitting: too long, or not JSON
                    items.append(el)
                    continue
                if len(el[1]) > max_record:  # (the scanner lets one go once it is over, not exactly at)
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

    location_kind = "line"

    def locations(self, part: Part) -> list[int]:
        return [line for line, _ in part.items]  # (each element's first line, as its Skips name it)

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        path = part.sl.file.path
        for line, raw in part.items:
            if type(raw) is Skip:  # over --max-record-mb, or not JSON: found while splitting
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


FORMAT = Json()
