"""manifest.json read in slices: its head (every key but ``shards``) and its shard entries one at a time,
in constant memory whatever the number of shards (``packer stats`` of a million-shard build).

The file is decoded 1 MiB at a time and each JSON value parsed with the standard library's decoder
(``json.JSONDecoder.raw_decode``: the same scanner ``json.loads`` uses, so what it accepts and the values
it gives are the same); only one shard entry is held at a time. ``entries()`` reads the file again,
so a caller needing the head before the entries (they may come in any order) makes two passes.
Any problem (bad JSON, a malformed head or entry) is reported as ``read_manifest`` reports it: the
manifest is then read whole to say exactly what is wrong, as before.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator

from ..errors import ShardError
from ..io import Storage, open_regular
from .manifest import check_manifest, entry_problem, read_manifest, read_manifest_bytes
from .schema import MANIFEST

BLOCK = 1 << 20
MAX_VALUE = 64 << 20  # one value (a shard entry, the tokenizer, ...) larger than this is refused
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _open_regular(path: str):
    """``path`` opened for reading if it is a regular file, else ``OSError``: a FIFO in the manifest's
    place would block the open and /dev/zero never ends (packer/io/regular.py)."""
    import os

    return os.fdopen(open_regular(path)[0], "rb")


class _Text:
    """The manifest's text, a block at a time, with the JSON values read from it one by one."""

    def __init__(self, store: Storage):
        self.buf, self.pos, self.eof = "", 0, False
        self.decode = codecs.getincrementaldecoder("utf-8")()
        if store.local:
            try:
                self.f = _open_regular(store.path(MANIFEST))
            except OSError:
                read_manifest_bytes(store)  # says why: not a build, an unfinished one, unreadable, not a file
                raise
        else:  # an object: one GET (its bytes held while read)
            import io

            self.f = io.BytesIO(read_manifest_bytes(store))

    def close(self) -> None:
        self.f.close()

    def _fill(self) -> None:
        block = self.f.read(BLOCK)
        self.eof = not block
        if len(self.buf) - self.pos > MAX_VALUE:
            raise ValueError("a value of more than 64 MiB")
        self.buf = self.buf[self.pos:] + self.decode.decode(block, final=self.eof)
        self.pos = 0

    def peek(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos:self.pos + 1]
            self._fill()

    def take(self, ch: str) -> None:
        if self.peek() != ch:
            raise ValueError(f"expected {ch!r}")
        self.pos += 1

    def value(self):
        """The next JSON value, read whole (more blocks are read while it is cut at the buffer's end)."""
        self.peek()
        while True:
            try:
                v, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self.eof:
                    raise
                self._fill()
                continue
            if end == len(self.buf) and not self.eof:  # a number may go on in the next block
                self._fill()
                continue
            self.pos = end
            return v


def _items(store: Storage, head_values: bool = True) -> Iterator[tuple[str, object]]:
    """The manifest's top-level items in file order: (key, value) for every key but ``shards``, then
    ("", entry) for each shard entry where the list stands. ``head_values`` False: the other keys'
    values are parsed but not kept (None)."""
    t = _Text(store)
    try:
        t.take("{")
        while t.peek() != "}":
            key = t.value()
            if not isinstance(key, str):
                raise ValueError("a key that is not a string")
            t.take(":")
            if key == "shards" and t.peek() == "[":
                t.take("[")
                while t.peek() != "]":
                    yield "", t.value()
                    if t.peek() != "]":
                        t.take(",")
                t.take("]")
                yield key, []
            else:  # (a shards that is not a list is kept: check_manifest says so)
                v = t.value()
                yield key, v if head_values or key == "shards" else None
            if t.peek() != "}":
                t.take(",")
        t.take("}")
        if t.peek():
            raise ValueError("extra data after the manifest")
    finally:
        t.close()


class ManifestStream:
    """The manifest of the build at ``store``, checked as ``read_manifest`` checks it, in two passes of
    constant memory: ``head`` (the manifest without ``shards``), ``n`` (its entries), ``entries()``.
    ``first(i, e)``, when given, sees every entry of the first pass (sums, counts, names)."""

    def __init__(self, store: Storage, first=None):
        self.store, self.path = store, store.path(MANIFEST)
        head, n = {}, 0
        try:
            for key, v in _items(store):
                if key:
                    head[key] = v
                    continue
                problem = entry_problem(n, v)
                if problem:
                    raise ShardError(f"{self.path}: malformed manifest ({problem})")
                if first is not None:
                    first(n, v)
                n += 1
            check_manifest(head, self.path)
        except (ShardError, ValueError, RecursionError) as err:
            read_manifest(store)  # the whole file, to say what is wrong exactly as ever
            raise ShardError(f"{self.path}: unreadable manifest ({err})") from None
        del head["shards"]
        self.head, self.n = head, n

    def entries(self) -> Iterator[dict]:
        """The shard entries, in order: a second read of the file (already checked by the first)."""
        return (v for key, v in _items(self.store, head_values=False) if not key)
