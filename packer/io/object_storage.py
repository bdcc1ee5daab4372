"""An object-store prefix (s3://, gs://, hdfs://, any fsspec scheme) as a ``Storage``,
through ``pyarrow.fs`` (or fsspec). There is no rename on an object store, but
one PUT is atomic per object, so every object is written whole, in one upload."""

from __future__ import annotations

import contextlib
import os
from urllib.parse import unquote, urlsplit

from ..errors import PackerError
from . import fence
from .atomic import atomic_write
from .storage_base import RangedFile, Storage, _io_error
from .uri import filesystem, first_line, join, redact


def _upload(uri: str, data) -> None:
    """One object at ``uri``, written whole (one PUT, or a multipart upload completed at the end)."""
    fs, path = filesystem(uri)
    try:
        with fs.open_output_stream(path) as f:
            f.write(data)
    except OSError as e:
        raise PackerError(f"cannot write {redact(uri)}: {first_line(e)}; nothing partial was kept: "
                          "fix the cause and rerun with --resume") from None


class ObjectStorage(Storage):
    local = False
    reads_in_place = fork_safe = False  # (pyarrow's S3 client runs threads: a fork would copy them mid-request)
    stamp_covers_content = sizes_by_listing = True

    def __init__(self, root: str):
        self.root = root

    def __repr__(self) -> str:
        return f"ObjectStorage({redact(self.root)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ObjectStorage) and other.root.rstrip("/") == self.root.rstrip("/")

    def __hash__(self) -> int:
        return hash(self.root.rstrip("/"))

    def path(self, rel: str = "") -> str:
        return join(self.root, rel)

    def _fs(self, rel: str = ""):
        return filesystem(self.path(rel))

    def list(self) -> dict[str, int]:
        """Every object below the prefix, {rel: bytes}; {} if none (one listing)."""
        import pyarrow.fs as pafs

        fs, path = self._fs()
        try:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.NotFound:
                return {}
            if info.type == pafs.FileType.File:
                raise PackerError(f"output {self.root} exists and is not a folder")
            entries = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        except OSError as e:
            raise _io_error("list", self.root, e) from None
        base = path.rstrip("/")
        return {i.path[len(base):].lstrip("/"): i.size for i in entries if i.type == pafs.FileType.File}

    def tops(self) -> list[str]:
        names = {k.split("/", 1)[0] for k in self.list()}
        return sorted(n for n in names if not n.startswith(".tmp-"))

    def has_folder(self, rel: str) -> bool:
        """Whether any object lies below ``rel/`` (a failed listing counts as no)."""
        try:
            return any(k.startswith(rel.rstrip("/") + "/") for k in self.list())
        except PackerError:
            return False

    def size(self, rel: str = "") -> int | None:
        import pyarrow.fs as pafs

        fs, path = self._fs(rel)
        info = fs.get_file_info(path)
        return info.size if info.type == pafs.FileType.File else None

    def read(self, rel: str = "", size_hint: int | None = None, limit: int | None = None) -> bytes:
        """The whole object (one GET), at most ``limit`` bytes of it."""
        fs, path = self._fs(rel)
        with fs.open_input_stream(path) as f:
            return f.read() if limit is None else f.read(limit)

    def ranged(self, rel: str = "") -> RangedFile:
        fs, path = self._fs(rel)
        f = fs.open_input_file(path)  # one HEAD for the size; each read is one ranged GET
        return RangedFile(lambda n, off: f.read_at(n, off), f.size(), f.close)

    def stream(self, rel: str = ""):
        fs, path = self._fs(rel)
        return fs.open_input_stream(path, buffer_size=8 << 20)

    def arrow_file(self, rel: str = ""):
        fs, path = self._fs(rel)
        return fs.open_input_file(path)

    def arrow_map(self, rel: str = ""):
        """A pyarrow random-access file over ``rel``: each read a ranged GET."""
        return self.arrow_file(rel)

    def map(self, rel: str = ""):
        """The whole object fetched into memory (one GET)."""
        with self.arrow_file(rel) as f:
            return f.read_buffer()

    def put(self, rel: str, data) -> None:
        if urlsplit(self.root).scheme.lower() == "file":
            # pyarrow's local filesystem writes in place: temp file, fsync, rename instead.
            path = os.path.join(unquote(urlsplit(self.root).path), *rel.split("/"))
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)  # folders appear with their first object, as on a store
            except OSError as e:
                raise PackerError(f"cannot write to output folder {self.root}: {e.strerror}") from None
            atomic_write(path, data)
            return
        uri = self.path(rel)
        lease = fence.fence_for(uri)
        if lease is not None:  # a build holds this prefix: the write is fenced by its lease (packer/io/fence.py)
            fence.fenced_put(uri, data, lease, _upload)
        else:
            _upload(uri, data)

    def delete(self, rels: list[str]) -> None:
        fs, path = self._fs()
        base = path.rstrip("/")
        try:
            for rel in rels:
                fs.delete_file(base + "/" + rel)
        except OSError as e:
            raise _io_error("delete in", self.root, e) from None

    def clear(self, tops: list[str], first: str) -> None:
        keys = [k for k in self.list() if k.split("/", 1)[0] in tops or k.rsplit("/", 1)[-1].startswith(".tmp-")]
        self.delete(sorted(keys, key=lambda k: k != first))  # no reader may see ``first`` without the rest

    def make_dirs(self, rels: list[str]) -> None:
        pass  # prefixes appear with their first object

    def check_removable(self, tops: list[str]) -> None:
        pass  # a store's permissions show only when a delete is tried; the manifest goes first

    def lock(self):
        """Take the build lock on this prefix: a lease object (packer/io/object_lock.py); on file://, the flock."""
        if urlsplit(self.root).scheme.lower() == "file":
            from .lock import lock_folder

            return lock_folder(unquote(urlsplit(self.root).path))
        from .object_lock import ObjectLock, check_nesting

        lock = ObjectLock(self)
        check_nesting(self, lock.store)
        return lock.acquire()

    def held_by(self) -> dict | None:
        """What the build holding this prefix's lease now wrote (``{}`` if unreadable); None if none holds it
        (none there, released, or its lease run out)."""
        if urlsplit(self.root).scheme.lower() == "file":
            from .lock import held_by

            return held_by(unquote(urlsplit(self.root).path))
        from .object_lock import held_by

        return held_by(self)

    def stamp(self, rel: str = "") -> tuple[int, int, int] | None:
        """(size, mtime_ns, 0) of the object now, or None."""
        import pyarrow.fs as pafs

        try:
            fs, path = self._fs(rel)
            info = fs.get_file_info(path)
        except OSError:
            return None
        return (info.size, info.mtime_ns or 0, 0) if info.type == pafs.FileType.File else None

    @contextlib.contextmanager
    def local_copy(self, rel: str, nbytes: int, checksum: str, cache, verify: bool = False):
        """A local path holding ``rel``: fetched into ``cache`` (a ``ShardCache``), valid inside the ``with``."""
        with cache.local(self, rel, nbytes, checksum, verify=verify) as p:
            yield p
