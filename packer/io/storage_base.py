"""What every store offers (``Storage``) and a ranged-read handle (``RangedFile``);
the two stores are local_storage.LocalStorage and object_storage.ObjectStorage,
and ``storage.storage_for`` picks one."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import PackerError
from .atomic import json_bytes
from .uri import first_line, redact


@dataclass(frozen=True)
class RangedFile:
    """A file opened for ranged reads: ``pread(n, offset)`` is safe from many threads at once."""

    pread: object  # (n, offset) -> bytes
    size: int  # bytes
    close: object  # () -> None


class Storage:
    """A folder (or one file) on some store; ``rel`` names are "/"-separated, relative to ``root``.

    Reads raise ``OSError`` (``FileNotFoundError`` for a missing name) as the
    built-in ``open`` would; writes and listings raise ``PackerError`` with one line.
    """

    local: bool  # a folder of this machine's file system (not a URI): only io/ reads it, and the few places
    # docs/architecture.md lists; everyone else asks one of the questions below, each answered by the store.
    root: str
    # Files are read where they lie (mapped, pread by the byte): a row layout is read in place and a shard's
    # size is checked on open. False: a file is fetched (a GET) into packer's cache, and checked there.
    reads_in_place: bool
    # Worker processes may be forked while this store is open (no client threads of its own to copy).
    fork_safe: bool
    # A file's stamp (an object's ETag) already covers every byte of it: nothing to hash to see an edit.
    stamp_covers_content: bool
    # Listing the folder gives every file's size in one request (cheaper than a size query a file).
    sizes_by_listing: bool

    def identity(self) -> str:
        """One name for this folder whatever it was called by (a local path resolved through its links)."""
        return self.root.rstrip("/")

    def missing_folder(self) -> bool:
        """Whether the root is known not to be a folder (a local path that is none; a prefix always may be)."""
        return False

    def map_or_read(self, rel: str):
        """``rel``'s bytes: mapped where the store reads in place, else read whole."""
        return self.map(rel) if self.reads_in_place else self.read(rel)

    def path(self, rel: str = "") -> str:
        """What to call ``rel`` in messages and records (a path or a URI)."""
        raise NotImplementedError

    def child(self, rel: str) -> "Storage":
        return type(self)(self.path(rel))

    def inside(self, rel) -> bool:
        """Whether ``rel`` (a name read from a manifest) stays below the root:
        not absolute, no ``..``, a plain string."""
        if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
            return False
        return ".." not in rel.split("/") and not os.path.isabs(rel)

    def put_json(self, rel: str, obj) -> None:
        self.put(rel, json_bytes(obj))

    # Implemented by each store: list, tops, size, read, ranged, stream,
    # arrow_file, map, put, delete, clear, make_dirs, local_copy.


def _io_error(what: str, uri: str, e: BaseException) -> PackerError:
    return PackerError(f"cannot {what} {redact(uri)}: {first_line(e)}")
