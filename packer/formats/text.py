"""Plain text (.txt, .md): one document per file, read whole."""

from __future__ import annotations

from typing import Iterator

from ..io import storage_for
from .base import Document, Format, Part, Record, Skip, Slice, unreadable


class Text(Format):
    name = "text"
    suffixes = {".txt": None, ".md": None}
    whole_file = True

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int) -> Iterator[Part]:
        yield read_whole(sl, on_bytes)

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        path = part.sl.file.path
        if not isinstance(field, tuple):  # a chat build: a text file holds no conversation
            for _ in part.items:
                yield Skip("not_conversation", path)
            return
        for data in part.items:
            try:
                text = data.decode("utf-8-sig")  # a byte-order mark is encoding, not text
            except UnicodeDecodeError as e:
                yield Skip("invalid_utf8", f"{path}: byte {e.start}")
                continue
            yield Document(text) if text else Skip("empty", path)

    def head(self, sl: Slice, chars: int) -> str | None:
        # One document per file: its start is sample enough (reading it would read it all).
        try:
            with storage_for(sl.file.path).stream() as f:
                return f.read(4 * chars).decode("utf-8", "ignore")[:chars]
        except OSError:
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
