"""An exclusive lock on a local build folder, and the state a killed build leaves for ``--resume``.

``OutLock`` holds ``fcntl.flock`` on ``OUT/.packer.lock`` for the whole
build: a second build into the same folder is refused at once, with who
holds it (pid, host, start time), instead of both replacing each other's
files. The kernel drops the lock when the holder dies (SIGKILL included),
so a killed build never leaves a stale lock; forked workers share it, so
none of them may still be writing when another build starts.

The lock file also holds the input stamps of the build that made it (each
input's size, modification time and inode, hashed): a build removes the
file when it completes, so the one a killed build leaves tells ``--resume``
whether the inputs changed in between. A build that never finishes keeps it.
The bytes of a finished build folder are the same as without a lock.

A build is also refused where it would write into another build: into a
folder inside the OUT of a build running now (any folder above holds a held
lock), into OUT/holdout of another build (finished or not: that build's
holdout split is its own), or into a folder whose holdout a running build
writes (``check_nesting``).

Object stores have a lease instead (packer/io/object_lock.py).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket

from ..errors import PackerError

LOCK_NAME = ".packer.lock"
# packer/io imports nothing else in packer: these are packer.shards.BUILD_JSON and
# packer.pipeline.unit.HOLDOUT_DIR (tests/io/test_lock.py checks that they agree).
BUILD_MARK = "build.json"
HOLDOUT = "holdout"


class NoLock:
    """Where there is no lock (an object store): the same calls, doing nothing."""

    previous = None

    def record(self, inputs: str, listing: dict | None = None) -> None:
        pass

    def release(self, finished: bool) -> None:
        pass

    def check(self) -> None:
        pass


class OutLock:
    """``flock`` on ``folder/.packer.lock``; ``previous``: what the last holder wrote (a dict, or None)."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, LOCK_NAME)
        self.fd: int | None = None
        self.previous: dict | None = None
        self.created = False  # the lock file is ours: removed again if this build refuses to start
        self.recorded = False

    def acquire(self) -> "OutLock":
        import fcntl

        while True:
            try:
                self.created = not os.path.lexists(self.path)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0),
                             0o666)
            except OSError as e:
                raise PackerError(f"cannot write to output folder {os.path.dirname(self.path)}: {e.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = describe_holder(_read(fd))
                os.close(fd)
                raise PackerError(f"{os.path.dirname(self.path)} is in use by another packer build ({holder}); "
                                  "wait for it to finish, or write to another folder") from None
            except OSError:  # a file system without flock (some network mounts): go on unlocked
                self.fd, self.previous = fd, _read(fd)
                return self
            # The holder before us may have removed the file as it finished:
            # then our lock is on a name nobody else sees. Take the new one.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd, self.previous = fd, _read(fd)
                return self
            os.close(fd)

    def record(self, inputs: str, listing: dict | None = None) -> None:
        """Write who holds the lock, and the stamp of the inputs (``inputs``: a hex digest; ``listing``:
        ``stamp.listing``, the first inputs' stamps, so a resume can name the one that changed)."""
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "inputs": inputs, **({"listing": listing} if listing is not None else {})}
        data = json.dumps(info).encode()
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        self.recorded = True

    def check(self) -> None:
        """Nothing to check: a flock cannot be taken from its holder (``ObjectLock.check`` can fail)."""

    def release(self, finished: bool) -> None:
        """Drop the lock; ``finished``: the build completed, so its state is not needed any more."""
        if self.fd is None:
            return
        if finished or (self.created and not self.recorded):
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # while still held: no other build can be inside the folder
        os.close(self.fd)
        self.fd = None


READ_BYTES = 4 << 20  # the most of a lock file read back (its listing of inputs: about 150 bytes a file)


def _read(fd: int) -> dict | None:
    try:
        data = os.pread(fd, READ_BYTES, 0)
        info = json.loads(data) if data else None
        return info if isinstance(info, dict) else None
    except (OSError, ValueError):
        return None


def describe_holder(info: dict | None) -> str:
    if not info:
        return "holder unknown"
    return f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}"


def lock_folder(root: str) -> OutLock:
    """The build lock on local folder ``root`` (made if missing), after ``check_nesting``."""
    if os.path.lexists(root) and not os.path.isdir(root):
        raise PackerError(f"output {root} exists and is not a folder")
    check_nesting(root)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise PackerError(f"cannot write to output folder {root}: {e.strerror}") from None
    return OutLock(root).acquire()


def held_by(folder: str) -> dict | None:
    """What the holder wrote (``{}`` if nothing) if a build holds ``folder``'s lock now; None if none does."""
    import fcntl

    try:
        fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a moment's shared lock: refused while a build holds it
    except BlockingIOError:
        return _read(fd) or {}
    except OSError:
        return None
    finally:
        os.close(fd)  # drops the shared lock
    return None


def check_nesting(root: str) -> None:
    """Refuse (``PackerError``, naming the build) a build into ``root`` that would write into another build."""
    real = os.path.realpath(root)
    parent = p = os.path.dirname(real)
    while True:
        holder = held_by(p)
        if holder is not None:
            raise PackerError(f"{root} is inside {p}, the output of a packer build running now ({describe_holder(holder)}); "
                              "write to another folder")
        if os.path.dirname(p) == p:
            break
        p = os.path.dirname(p)
    if os.path.basename(real) == HOLDOUT and os.path.isfile(os.path.join(parent, BUILD_MARK)):
        raise PackerError(f"{root} is the holdout split of the packer build in {parent}, written by that build "
                          "alone (rebuild it with --overwrite to replace both); write to another folder")
    holder = held_by(os.path.join(real, HOLDOUT))
    if holder is not None:
        raise PackerError(f"{root} holds {os.path.join(real, HOLDOUT)}, the output of a packer build running now "
                          f"({describe_holder(holder)}); wait for it to finish, or write to another folder")
