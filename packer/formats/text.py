"""Plain text (.txt, .md, and each compressed: .txt.gz, .md.zst, .txt.bz2, .txt.xz): one document per file, read whole.

A compressed file is decompressed on the core that tokenizes it; a cut or
corrupt one is skipped whole as ``truncated`` (its one document is broken).
"""

from __future__ import annotations

from typing import Iterator

from ..io import COMPRESSION_SUFFIXES, decompress_all, open_stream, storage_for, truncation_errors
from .base import Document, Format, Part, Record, Skip, Slice, unreadable


class Text(Format):
    name = "text"
    suffixes = {ext + z: comp for ext in (".txt", ".md") for z, comp in {"": None, **COMPRESSION_SUFFIXES}.items()}
    whole_file = True

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int) -> Iterator[Part]:
        yield read_whole(sl, on_bytes)

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        path, comp = part.sl.file.path, part.sl.file.compression
        for data in part.items:
            if comp is not None:
                try:
                    data = decompress_all(data, comp)
                except truncation_errors(comp):
                    yield Skip("truncated", path)
                    continue
            try:
                text = data.decode("utf-8-sig")  # a byte-order mark is encoding, not text
            except UnicodeDecodeError as e:
                yield Skip("invalid_utf8", f"{path}: byte {e.start}")
                continue
            yield Document(text) if text else Skip("empty", path)

    def head(self, sl: Slice, chars: int) -> str | None:
        # One document per file: its start is sample enough (reading it would read it all).
        try:
            if sl.file.compression is None:
                with storage_for(sl.file.path).stream() as f:
                    return f.read(4 * chars).decode("utf-8", "ignore")[:chars]
            with open_stream(sl.file.path, sl.file.compression) as f:
                return f.read(4 * chars).decode("utf-8", "ignore")[:chars]
        except (OSError, *truncation_errors(sl.file.compression)):
            return ""


def read_whole(sl: Slice, on_bytes=None) -> Part:
    """A whole file as one Part (safe to call from many threads at once)."""
    try:
        data = storage_for(sl.file.path).read(size_hint=sl.file.size)
    except OSError as e:
        return Part(sl, [], tail=unreadable(sl, e))
    if on_bytes is not None:
        on_bytes(len(data))
    return Part(sl, [data], nbytes=len(data))


FORMAT = Text()
