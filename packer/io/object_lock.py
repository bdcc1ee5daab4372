"""The build lock on an object-store OUT: a lease object at ``OUT/.packer.lock``.

There is no ``flock`` over a bucket, and no kernel to drop a lock when its
holder dies, so the lock is an object holding who holds it (pid, host, start
time, a random token) and for how long (``lease_s``), taken and renewed with
conditional writes (packer/io/s3.py):

- **take**: ``PutObject`` with ``If-None-Match: *``: of two builds starting
  at once, exactly one creates it; the other reads it and is refused, naming
  the holder, as on a local folder;
- **renew**: every ``lease_s / 4`` a thread rewrites it with ``If-Match``:
  its Last-Modified (the store's clock) moves on;
- **stale**: a lock not renewed for ``lease_s`` by the store's clock (its
  holder died, or lost the network), one its holder released without
  finishing (Ctrl-C, a refused start: ``released``), or one held by a pid that
  no longer runs on this very host, is taken over with ``If-Match`` on the
  ETag read: of two builds taking over at once, one wins;
- **record / release**: as ``OutLock`` (packer/io/lock.py): the input stamp
  of the build is written into it, a finished build deletes it (``If-Match``),
  an unfinished one leaves it (``released``, with its stamps) for ``--resume``.

A holder whose renewal finds another holder (it was stopped, or cut off, for
longer than the lease) has lost the lock: it says so on stderr, interrupts
its main thread (the build stops as on Ctrl-C) and ``check()`` raises. Its
workers may be mid-unit: every object write checks the lease first
(packer/io/fence.py), so none of them writes into the build that took over.
``$PACKER_LEASE_S`` sets the lease (the tests use seconds).

Without boto3, or on a store other than S3, the same protocol runs over plain
reads and writes (``_Unconditional``): it names the holder of a running build,
but two builds starting within the same moment can both win. ``file://`` has
the local flock.
"""

from __future__ import annotations

import _thread
import contextlib
import datetime
import json
import os
import socket
import sys
import threading
import time
import uuid
import weakref

from ..errors import PackerError
from . import fence, s3
from .lock import BUILD_MARK, HOLDOUT, LOCK_NAME, describe_holder
from .s3 import Conflict, Got, Unsupported
from .uri import filesystem, first_line, redact

_HELD: "weakref.WeakSet[ObjectLock]" = weakref.WeakSet()  # locks renewing now (see _fork_* below)
_FORKING: list = []  # the locks whose mutex a fork in progress holds

LEASE_S = 60.0  # a holder that has not renewed its lock for this long (the store's clock) counts as gone
LEASE_ENV = "PACKER_LEASE_S"  # seconds, overrides LEASE_S (the tests' stalled builds lose their lease in seconds)
LEASE_THREAD = "packer-lock-lease"  # the renewal thread's name: safe to fork beside (the fork waits for a renewal)
TRIES = 8  # rounds of take / look / take over before giving up on a contended lock


def lease_seconds() -> float:
    """The lease a build takes: ``LEASE_S``, or ``$PACKER_LEASE_S`` where set to a number of seconds."""
    try:
        v = float(os.environ.get(LEASE_ENV) or LEASE_S)
    except ValueError:
        return LEASE_S
    return v if 0 < v < 10**7 else LEASE_S


class ObjectLock:
    """The lease at ``storage``'s ``.packer.lock``; ``previous``: what the last holder wrote (a dict, or None)."""

    def __init__(self, storage, backend=None):
        self.root = storage.root
        self.uri = storage.path(LOCK_NAME)
        self.store = backend or (s3 if s3.client(self.uri) is not None else _Unconditional())
        self.info = {"pid": os.getpid(), "host": socket.gethostname(),
                     "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "token": uuid.uuid4().hex, "lease_s": lease_seconds(), "inputs": None}
        self.previous: dict | None = None
        self.etag: str | None = None
        self.created = False  # the lock object is ours: deleted again if this build refuses to start
        self.recorded = False
        self.lost: str | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._main = False

    def acquire(self) -> "ObjectLock":
        try:
            self._take()
        except Unsupported:  # an S3-compatible store without conditional writes (an older MinIO or Ceph)
            self.store = _Unconditional()
            self._take()
        self._main = threading.current_thread() is threading.main_thread()
        self._thread = threading.Thread(target=self._renew, name=LEASE_THREAD, daemon=True)
        self._thread.start()
        _HELD.add(self)
        if self.store is s3:  # every object this build writes below OUT now checks this lease (packer/io/fence.py)
            fence.hold(self.root, self.uri, self.info["token"], self.info["lease_s"])
        return self

    def _take(self) -> None:
        """Create the lock, or take over a stale one; refuse a live one. Looked at first, so that a store
        that ignores If-None-Match still does not overwrite a running build's lock."""
        for _ in range(TRIES):
            cur = self.store.get(self.uri)
            if cur is None:
                try:
                    self.etag = self.store.create(self.uri, self._body())
                    self.created = True
                    return
                except Conflict:
                    continue  # another build made it in between: look at it
            info = _parse(cur.body)
            if _live(info, cur):
                left = max(0, round(_lease(info) - (cur.now - cur.modified)))
                raise PackerError(f"{self.root} is in use by another packer build ({describe_holder(info)}; its lease "
                                  f"runs {left} s more unless renewed); wait for it to finish, or write to another "
                                  "folder") from None
            self.info["inputs"] = info.get("inputs") if info else None  # kept for --resume until we record ours
            if info and "listing" in info:
                self.info["listing"] = info["listing"]
            try:
                self.etag = self.store.replace(self.uri, self._body(), cur.etag)
                self.previous = info
                return
            except Conflict:
                continue  # another build took it over first: look again
        raise PackerError(f"cannot take the lock {self.uri}: other builds keep taking it; try again")

    def record(self, inputs: str, listing: dict | None = None) -> None:
        """Write the stamp of the inputs (a hex digest) into the lock, and ``listing`` (``stamp.listing``)."""
        with self._mutex:
            self.check()
            self.info["inputs"] = inputs
            if listing is not None:
                self.info["listing"] = listing
            self._write()
        self.recorded = True

    def check(self) -> None:
        """Raise ``PackerError`` if another build has taken the lock from this one."""
        if self.lost:
            raise PackerError(f"lost the lock on {self.root}: {self.lost}; this build stopped, "
                              "its output there may be mixed: rerun with --overwrite")

    def release(self, finished: bool) -> None:
        """Stop renewing; delete the lock (finished, or never recorded in a lock we made), else mark it released."""
        self._stop.set()
        _HELD.discard(self)
        fence.drop(self.root)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._mutex:
            if self.lost or self.etag is None:
                return
            with contextlib.suppress(Conflict, PackerError):  # the lease runs out by itself if this fails
                if finished or (self.created and not self.recorded):
                    self.store.delete(self.uri, self.etag)
                else:
                    self.info["released"] = True
                    self._write()
            self.etag = None

    def _body(self) -> bytes:
        self.info["renewed"] = round(time.time(), 3)  # this host's clock: read only where the store keeps no time
        return json.dumps(self.info).encode()

    def _write(self) -> None:
        self.etag = self.store.replace(self.uri, self._body(), self.etag)

    def _renew(self) -> None:
        renewed = time.monotonic()
        while not self._stop.wait(self.info["lease_s"] / 4):
            with self._mutex:
                if self._stop.is_set():
                    return
                try:
                    self._write()
                    renewed = time.monotonic()
                except Conflict:
                    return self._lose("another build took it over after this one had not renewed it in time")
                except PackerError as e:
                    if time.monotonic() - renewed > self.info["lease_s"]:
                        return self._lose(f"it could not be renewed for over {self.info['lease_s']:.0f} s ({e})")

    def _lose(self, why: str) -> None:
        self.lost = why
        print(f"packer: error: lost the lock on {self.root}: {why}; stopping", file=sys.stderr, flush=True)
        if self._main:
            _thread.interrupt_main()


def _fork_before() -> None:
    """A fork (the local engine's workers) waits for a renewal in flight, so that no lock the renewal
    holds (its mutex, the HTTP pool's) is copied locked into the child."""
    _FORKING[:] = list(_HELD)
    for lk in _FORKING:
        lk._mutex.acquire()


def _fork_after_parent() -> None:
    for lk in _FORKING:
        lk._mutex.release()
    _FORKING.clear()


def _fork_after_child() -> None:
    """In a forked worker the lock is not held (its thread is not there): it never renews or releases."""
    for lk in _FORKING:
        lk._mutex = threading.Lock()
        lk._stop.set()
        lk._thread, lk.etag = None, None
    _FORKING.clear()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_fork_before, after_in_parent=_fork_after_parent, after_in_child=_fork_after_child)


def check_nesting(storage, store) -> None:
    """``lock.check_nesting`` on a store: refuse a build into another build's holdout, into a prefix inside the
    OUT of a build running now, or into a prefix whose holdout a running build writes (a GET per level above)."""
    root = storage.root.rstrip("/")
    scheme, _, rest = root.partition("://")
    parts = rest.split("/")
    parent = f"{scheme}://" + "/".join(parts[:-1]) if len(parts) > 1 else None
    for k in range(len(parts) - 1, 0, -1):
        above = f"{scheme}://" + "/".join(parts[:k])
        _refuse_live(store, above, f"{root} is inside {above}, the output of a packer build running now", "")
    if parent and parts[-1] == HOLDOUT and type(storage)(parent).size(BUILD_MARK) is not None:
        raise PackerError(f"{root} is the holdout split of the packer build in {parent}, written by that build "
                          "alone (rebuild it with --overwrite to replace both); write to another folder")
    _refuse_live(store, f"{root}/{HOLDOUT}", f"{root} holds {root}/{HOLDOUT}, the output of a packer build running now",
                 "wait for it to finish, or ")


def _refuse_live(store, prefix: str, what: str, advice: str) -> None:
    try:
        cur = store.get(f"{prefix}/{LOCK_NAME}")
    except PackerError:  # a level this build may not read (or a bucket that is not there): no build known there
        return
    if cur is not None:
        info = _parse(cur.body)
        if _live(info, cur):
            raise PackerError(f"{what} ({describe_holder(info)}); {advice}write to another folder")


def held_by(storage) -> dict | None:
    """What the build holding ``storage``'s lease wrote (``{}`` if unreadable), if it holds it now; else None."""
    uri = storage.path(LOCK_NAME)
    store = s3 if s3.client(uri) is not None else _Unconditional()
    try:
        cur = store.get(uri)
    except PackerError:  # a prefix this caller may not read: no build known there
        return None
    info = _parse(cur.body) if cur is not None else None
    return (info or {}) if cur is not None and _live(info, cur) else None


def _parse(body: bytes) -> dict | None:
    try:
        info = json.loads(body)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def _lease(info: dict | None) -> float:
    v = info.get("lease_s") if info else None
    return float(v) if isinstance(v, (int, float)) and 0 < v < 10**7 else LEASE_S


def _live(info: dict | None, cur: Got) -> bool:
    """Whether the lock read (``info``: its JSON) still holds: not released, renewed within its lease, and not
    held by a process that is gone from this very host."""
    if info and info.get("released"):
        return False
    if cur.now - cur.modified > _lease(info):
        return False
    if info and info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
        return _alive(info["pid"])
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


class _Unconditional:
    """The lock's four calls over plain reads and writes (a store without conditional writes): each
    checks what is there first, so it is a lock against a build already running, not a race-free one."""

    def get(self, uri: str) -> Got | None:
        import pyarrow.fs as pafs

        fs, path = filesystem(uri)
        try:
            fi = fs.get_file_info(path)
            if fi.type != pafs.FileType.File:
                return None
            with fs.open_input_stream(path) as f:
                body = f.read()
        except OSError:
            return None
        info = _parse(body) or {}
        renewed = info.get("renewed") if isinstance(info.get("renewed"), (int, float)) else None
        modified = fi.mtime.timestamp() if fi.mtime is not None else renewed if renewed is not None else 0.0
        return Got(body, _etag(body), modified, time.time())

    def create(self, uri: str, body: bytes) -> str:
        if self.get(uri) is not None:
            raise Conflict("exists")
        return self._put(uri, body)

    def replace(self, uri: str, body: bytes, etag: str) -> str:
        cur = self.get(uri)
        if cur is None or cur.etag != etag:
            raise Conflict("changed")
        return self._put(uri, body)

    def delete(self, uri: str, etag: str) -> None:
        cur = self.get(uri)
        if cur is None or cur.etag != etag:
            raise Conflict("changed")
        fs, path = filesystem(uri)
        try:
            fs.delete_file(path)
        except OSError as e:
            raise PackerError(f"cannot delete {redact(uri)}: {first_line(e)}") from None

    def _put(self, uri: str, body: bytes) -> str:
        fs, path = filesystem(uri)
        try:
            with fs.open_output_stream(path) as f:
                f.write(body)
        except OSError as e:
            raise PackerError(f"cannot write {redact(uri)}: {first_line(e)}") from None
        return _etag(body)


def _etag(body: bytes) -> str:
    import xxhash

    return xxhash.xxh3_64_hexdigest(body)
