"""Storage: one interface for a local folder and an object-store prefix.

``storage_for(path)`` decides once whether ``path`` is local or a URI
(``s3://bucket/out``, ``gs://``, ``hdfs://``, any fsspec scheme) and returns
a ``Storage`` rooted there; every other module asks it for what it needs by
names relative to that root ("/"-separated: ``shards/000001.arrow``) and never
branches on local versus remote itself.

Local storage keeps the measured fast paths: ``os.pread`` for ranged reads,
one ``read`` call for a whole small file, memory maps, and atomic writes
(temp file, fsync, rename). Object stores go through ``pyarrow.fs`` (or
fsspec). There is no rename on an object store, but one PUT is atomic per
object (a reader sees the whole object or none; a multipart upload shows
nothing until it completes), so every object is written whole, in one
upload: a build's manifest, written last, still means the build is complete.
"""
from __future__ import annotations

import contextlib
import functools
import mmap
import os
import shutil

from ..errors import PackerError
from .atomic import atomic_write
from .object_storage import ObjectStorage
from .regular import FLAGS as REGULAR_FLAGS, open_regular
from .storage_base import RangedFile, Storage
from .uri import check_uri, is_uri


def storage_for(path: str | os.PathLike) -> "Storage":
    """The storage rooted at ``path``: a local folder or file, or a URI."""
    path = os.fspath(path)
    if is_uri(path):
        check_uri(path)
        return ObjectStorage(path)
    return LocalStorage(path)


class LocalStorage(Storage):
    local = True
    reads_in_place = fork_safe = True
    stamp_covers_content = sizes_by_listing = False

    def identity(self) -> str:
        return os.path.realpath(self.root)

    def missing_folder(self) -> bool:
        return not os.path.isdir(self.root)

    def __init__(self, root: str):
        self.root = root

    def __repr__(self) -> str:
        return f"LocalStorage({self.root!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, LocalStorage) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def path(self, rel: str = "") -> str:
        return os.path.join(self.root, *rel.split("/")) if rel else self.root

    def list(self) -> dict[str, int]:
        """Every file below the root, {rel: bytes}, sorted; {} if the root does not exist."""
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise PackerError(f"output {self.root} exists and is not a folder")
        out = {}
        for top, dirs, files in os.walk(self.root):
            dirs.sort()
            for n in sorted(files):
                full = os.path.join(top, n)
                with contextlib.suppress(OSError):
                    out[os.path.relpath(full, self.root).replace(os.sep, "/")] = os.path.getsize(full)
        return out

    def tops(self) -> list[str]:
        """The names directly below the root, sorted ([] if it does not exist)."""
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise PackerError(f"output {self.root} exists and is not a folder")
        return sorted(os.listdir(self.root)) if os.path.isdir(self.root) else []

    def has_folder(self, rel: str) -> bool:
        return os.path.isdir(self.path(rel))

    def size(self, rel: str = "") -> int | None:
        p = self.path(rel)
        return os.path.getsize(p) if os.path.isfile(p) else None

    def read(self, rel: str = "", size_hint: int | None = None, limit: int | None = None) -> bytes:
        """The whole file (at most ``limit`` bytes of it) in as few system calls as we can: open, one read, close.

        ``open(path, "rb").read()`` makes nine calls (two fstats, an ioctl, two
        lseeks, a read, a read that finds the end, a close); on a network or
        FUSE mount each can be a round trip, and with thousands of small files
        they cost the build more CPU than it spends on a file's text. Asking
        for one byte more than ``size_hint`` (the size discovery saw) tells in
        the same call whether the file still ends there; any other answer (it
        shrank or grew, or the read was capped at 2 GiB) reads on to the end.
        """
        if size_hint is None:  # checked: a regular file (packer/io/regular.py: a FIFO never blocks)
            fd, size_hint = open_regular(self.path(rel))
        else:  # (discovery saw a regular file of that size: no fstat; O_NONBLOCK still keeps a FIFO from blocking)
            fd = os.open(self.path(rel), REGULAR_FLAGS)
        try:
            first = size_hint + 1
            if limit is not None:
                first = min(first, limit)
            data = os.read(fd, first)
            if len(data) == first - 1:
                return data
            parts, got = [data], len(data)
            while limit is None or got < limit:
                chunk = os.read(fd, 1 << 24 if limit is None else min(1 << 24, limit - got))
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)

    def ranged(self, rel: str = "") -> RangedFile:
        fd = os.open(self.path(rel), os.O_RDONLY)
        return RangedFile(functools.partial(os.pread, fd), os.fstat(fd).st_size, functools.partial(os.close, fd))

    def stream(self, rel: str = ""):
        return open(self.path(rel), "rb")

    def arrow_file(self, rel: str = ""):
        """What pyarrow readers (``pq.ParquetFile``, ``pa.ipc.open_file``) take: the path, memory-mapped by them."""
        return self.path(rel)

    def arrow_map(self, rel: str = ""):
        """A pyarrow random-access file over ``rel``: memory-mapped (``OSError`` unless a regular file:
        ``pa.memory_map`` would block on a FIFO)."""
        import pyarrow as pa

        fd, size = open_regular(self.path(rel))
        try:
            if not size:
                return pa.BufferReader(b"")
            return pa.BufferReader(pa.py_buffer(mmap.mmap(fd, 0, access=mmap.ACCESS_READ)))
        finally:
            os.close(fd)

    def map(self, rel: str = ""):
        """The file's bytes as a read-only memory map, read ahead aggressively (a cold file read once);
        ``OSError`` unless a regular file (never blocks on a FIFO), ``ValueError`` if empty."""
        fd, _ = open_regular(self.path(rel))
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        if hasattr(mmap, "MADV_SEQUENTIAL"):
            mm.madvise(mmap.MADV_SEQUENTIAL)
        return mm

    def put(self, rel: str, data) -> None:
        """Publish ``data`` (bytes or a ``pa.Buffer``) at ``rel`` atomically: a reader sees all of it or nothing."""
        atomic_write(self.path(rel), data)

    def delete(self, rels: list[str]) -> None:
        for rel in rels:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(rel))

    def clear(self, tops: list[str], first: str) -> None:
        """Remove the top-level names ``tops`` (folders whole), ``first`` before the others."""
        try:
            for t in sorted(tops, key=lambda t: t != first):
                p = self.path(t)
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        except OSError as e:
            raise PackerError(f"cannot delete the old build in {self.root}: {e.filename}: {e.strerror}; "
                              "fix the cause and rerun with --overwrite") from None

    def check_removable(self, tops: list[str]) -> None:
        """Raise ``PackerError`` unless ``clear(tops)`` can delete everything
        (write access to each folder holding a name): checked before the
        first deletion, so a read-only mount or another owner's build is
        refused whole, never left half-deleted."""
        folders = [self.root]
        for t in tops:
            p = self.path(t)
            if os.path.isdir(p) and not os.path.islink(p):
                folders.extend(top for top, _, _ in os.walk(p))
        for f in folders:
            if not os.access(f, os.W_OK | os.X_OK):
                why = "read-only file system" if _read_only(f) else "permission denied"
                raise PackerError(f"cannot overwrite {self.root}: {f} cannot be changed ({why}); nothing was deleted")

    def make_dirs(self, rels: list[str]) -> None:
        try:
            for rel in rels:
                os.makedirs(self.path(rel), exist_ok=True)
        except OSError as e:
            raise PackerError(f"cannot write to output folder {self.root}: {e.strerror}") from None

    @contextlib.contextmanager
    def local_copy(self, rel: str, nbytes: int, checksum: str, cache, verify: bool = False):
        """A local path holding ``rel``: the file itself."""
        yield self.path(rel)

    def lock(self):
        """Take the build lock on this folder (made if missing); see packer/io/lock.py."""
        from .lock import lock_folder

        return lock_folder(self.root)

    def held_by(self) -> dict | None:
        """What the build holding this folder's lock now wrote (``{}`` if unreadable); None if none holds it."""
        from .lock import held_by

        return held_by(self.root)

    def stamp(self, rel: str = "") -> tuple[int, int, int] | None:
        """(size, mtime_ns, inode) of ``rel`` now, or None if it cannot be stat'ed."""
        try:
            st = os.stat(self.path(rel))
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns, st.st_ino


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False
