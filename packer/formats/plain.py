"""Any file read as text (``--format text``, ``--text-extensions``): source code, README, LICENSE, Makefile.

One document per file, read whole as .txt is; never chosen by a file's name
alone, only by those two options. A binary file (a NUL byte in its first
8 KB, as git and grep decide) is skipped whole and counted (``binary``);
bytes that are not UTF-8 are ``invalid_utf8``, as for .txt.
"""

from __future__ import annotations

from typing import Iterator

from .base import Part, Record, Skip
from .text import Text

SNIFF_BYTES = 8192  # a NUL byte in these first bytes makes a file binary


class Plain(Text):
    name = "plain"
    suffixes: dict = {}  # chosen by --format text or --text-extensions, never by its name

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        if isinstance(field, tuple):
            for data in part.items:
                nul = data[:SNIFF_BYTES].find(b"\0")
                if nul >= 0:
                    yield Skip("binary", f"{part.sl.file.path}: a NUL byte at byte {nul}")
                    return
        yield from super().parse(part, field)


FORMAT = Plain()
