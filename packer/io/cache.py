"""A local cache of shards of a build on object storage (``PackedDataset("s3://...")``).

A shard is downloaded on first use, hashed as it arrives (xxh3_128, against
the manifest) and published into the cache folder by rename only when whole
and verified; then it is memory-mapped like a local shard. Files are named
by their checksum, so two builds holding the same shard share one copy and a
changed shard can never be mistaken for a cached one.

Bounded: with ``max_bytes`` the least recently used shards are deleted to
make room (use = a process mapping it; the file's mtime records it). A shard
a process has mapped stays readable after it is deleted (POSIX keeps the
inode alive), so the bound counts the cache folder; shards still mapped by
a running process hold their disk space until it lets go of them.

Safe with DataLoader workers and several jobs on one machine: downloads go
to private temp files in parallel; publishing, eviction and the first map
of a shard happen under an exclusive lock on ``<folder>/.lock``, so no
process evicts a shard between another's publishing and mapping it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

import xxhash

from ..errors import PackerError, ShardError
from .uri import first_line

BLOCK = 8 << 20  # bytes per read of a download
STALE_TMP_S = 24 * 3600  # temp files of downloads killed this long ago are removed


def default_folder() -> str:
    base = os.environ.get("PACKER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "packer")
    return os.path.join(base, "shards")


class ShardCache:
    """``folder``: where cached shards live (default ``$PACKER_CACHE/shards``
    or ``~/.cache/packer/shards``). ``max_bytes``: bound on the shards kept
    there (None: no bound). Picklable: DataLoader workers share the folder."""

    def __init__(self, folder: str | os.PathLike | None = None, max_bytes: int | None = None):
        self.folder = os.path.abspath(os.fspath(folder)) if folder is not None else default_folder()
        if max_bytes is not None and max_bytes <= 0:
            raise PackerError(f"cache_max_bytes must be positive (got {max_bytes})")
        self.max_bytes = max_bytes

    def path_for(self, checksum: str) -> str:
        return os.path.join(self.folder, f"{checksum}.arrow")

    @contextlib.contextmanager
    def local(self, store, rel: str, nbytes: int, checksum: str, verify: bool = False):
        """A local path holding the shard ``rel`` of ``store`` (a ``Storage``), valid inside the ``with``
        (map it there; the mapping outlives an eviction). ``verify`` rehashes
        a shard already in the cache (new downloads are always hashed)."""
        uri = store.path(rel)
        if not checksum:
            raise ShardError(f"{uri}: the manifest gives no checksum for this shard; it cannot be cached safely")
        if self.max_bytes is not None and nbytes > self.max_bytes:
            raise PackerError(f"cache_max_bytes {self.max_bytes:,} is smaller than shard {uri} ({nbytes:,} bytes)")
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as e:
            raise PackerError(f"cannot create shard cache folder {self.folder}: {e.strerror}") from None
        path = self.path_for(checksum)
        with self._locked():
            if _size(path) == nbytes and (not verify or _hash(path) == checksum):
                os.utime(path)  # used now: last in line for eviction
                yield path
                return
        tmp = self._download(store, rel, nbytes, checksum)  # outside the lock: downloads run in parallel
        try:
            with self._locked():
                self._evict(nbytes, keep=path)
                os.replace(tmp, path)
                tmp = None
                yield path
        finally:
            if tmp is not None:
                _unlink(tmp)

    def _download(self, store, rel: str, nbytes: int, checksum: str) -> str:
        uri = store.path(rel)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".arrow")
        h, got = xxhash.xxh3_128(), 0
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    src = store.stream(rel)
                except FileNotFoundError:
                    raise ShardError(f"{uri}: shard is missing") from None
                with src:
                    while chunk := src.read(BLOCK):
                        h.update(chunk)
                        out.write(chunk)
                        got += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            if got != nbytes:
                what = "truncated" if got < nbytes else "longer than the manifest says"
                raise ShardError(f"{uri}: shard is {what} ({got} bytes, manifest says {nbytes})")
            if h.hexdigest() != checksum:
                raise ShardError(f"{uri}: checksum mismatch (xxh3_128 {h.hexdigest()}, manifest says {checksum}): shard is corrupt")
            return tmp
        except BaseException as e:
            _unlink(tmp)
            if isinstance(e, OSError):
                raise ShardError(f"cannot download {uri}: {first_line(e)}") from None
            raise

    def _evict(self, incoming: int, keep: str) -> None:
        """Delete least recently used shards until ``incoming`` more bytes fit (under the lock)."""
        now = time.time()
        files = []
        with os.scandir(self.folder) as it:
            for d in it:
                if d.name.startswith(".tmp-"):
                    with contextlib.suppress(OSError):
                        if now - d.stat().st_mtime > STALE_TMP_S:
                            os.unlink(d.path)  # a download killed long ago
                    continue
                if d.name.endswith(".arrow") and d.path != keep:
                    with contextlib.suppress(OSError):
                        st = d.stat()
                        files.append((st.st_mtime, st.st_size, d.path))
        if self.max_bytes is None:
            return
        total = sum(f[1] for f in files)
        for _, size, p in sorted(files):
            if total + incoming <= self.max_bytes:
                break
            _unlink(p)
            total -= size

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(os.path.join(self.folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                import fcntl
            except ImportError:  # no flock (Windows): one process per cache folder
                fcntl = None
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _hash(path: str) -> str:
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(BLOCK):
            h.update(chunk)
    return h.hexdigest()


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
