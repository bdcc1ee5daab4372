"""Plain text (.txt, .md, and each compressed: .txt.gz, .md.zst, .txt.bz2, .txt.xz): one document per file, read whole.

A compressed file is decompressed on the core that tokenizes it; a cut or
corrupt one is skipped whole as ``truncated`` (its one document is broken).
"""

from __future__ import annotations

from typing import Iterator

from ..io import COMPRESSION_SUFFIXES, decompress_all, open_stream, storage_for, truncation_errors
from .base import DEFAULT_MAX_RECORD, LET_GO_BYTES, Document, Format, Part, Record, Skip, Slice, first_line, unreadable


class Text(Format):
    name = "text"
    suffixes = {ext + z: comp for ext in (".txt", ".md") for z, comp in {"": None, **COMPRESSION_SUFFIXES}.items()}
    whole_file = True

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int,
              max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Part]:
        yield read_whole(sl, on_bytes, max_record)

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        path, comp = part.sl.file.path, part.sl.file.compression
        if not isinstance(field, tuple):  # a chat build: a text file holds no conversation
            for _ in part.items:
                yield Skip("not_conversation", path)
            return
        for data in part.items:
            if comp is not None:  # (compressed bytes, --max-record-mb in bytes): see read_whole
                data, limit = data
                try:
                    data = decompress_all(data, comp, limit)
                except truncation_errors(comp) as e:
                    yield Skip("truncated", f"{path} (the compressed stream is cut or corrupt: {first_line(e)})")
                    continue
                if data is None:
                    yield Skip("too_long", f"{path} (over --max-record-mb {limit / (1 << 20):g} decompressed)")
                    continue
            try:
                text = data.decode("utf-8-sig")  # a byte-order mark is encoding, not text
            except UnicodeDecodeError as e:
                yield Skip("invalid_utf8", f"{path}: byte {e.start}")
                continue
            yield Document(text) if text else Skip("empty", path)

    def let_go(self, part: Part) -> None:
        if part.nbytes >= LET_GO_BYTES:  # (where_of names the file: nothing of the bytes is needed)
            part.items[:] = [b"" if len(x if type(x) is bytes else x[0]) >= LET_GO_BYTES else x for x in part.items]

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


def read_whole(sl: Slice, on_bytes=None, max_record: int = DEFAULT_MAX_RECORD) -> Part:
    """A whole file as one Part (safe to call from many threads at once).

    A file over ``max_record`` bytes is not read (``too_long``); one whose
    size is not the size discovery saw changed under the build, and is
    counted ``truncated`` rather than read half-old, half-new."""
    f = sl.file
    if f.size > max_record:
        return Part(sl, [], tail=Skip("too_long", f"{f.path} ({f.size:,} bytes, over --max-record-mb "
                                                  f"{max_record / (1 << 20):g})"))
    try:
        data = storage_for(f.path).read(size_hint=f.size, limit=max_record + 1)
    except OSError as e:
        return Part(sl, [], tail=unreadable(sl, e))
    if on_bytes is not None:
        on_bytes(len(data))
    if len(data) != f.size:
        return Part(sl, [], tail=Skip("truncated", f"{f.path}: the file changed while it was read "
                                                   f"({f.size:,} bytes when found, {len(data):,} when read)"))
    # A compressed file is decompressed where it is parsed (on the core that tokenizes it), and
    # the limit travels with it: decompressed, the text is at most max_record bytes too.
    return Part(sl, [data if f.compression is None else (data, max_record)], nbytes=len(data))


FORMAT = Text()
