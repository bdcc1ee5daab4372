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

Object stores have no lock (no flock over a bucket); there the input plan
alone is compared on resume.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket

from ..errors import PackerError

LOCK_NAME = ".packer.lock"


class NoLock:
    """Where there is no lock (an object store): the same calls, doing nothing."""

    previous = None

    def record(self, inputs: str) -> None:
        pass

    def release(self, finished: bool) -> None:
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
                holder = _describe(_read(fd))
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

    def record(self, inputs: str) -> None:
        """Write who holds the lock, and the stamp of the inputs (``inputs``: a hex digest)."""
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "inputs": inputs}
        data = json.dumps(info).encode()
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        self.recorded = True

    def release(self, finished: bool) -> None:
        """Drop the lock; ``finished``: the build completed, so its state is not needed any more."""
        if self.fd is None:
            return
        if finished or (self.created and not self.recorded):
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # while still held: no other build can be inside the folder
        os.close(self.fd)
        self.fd = None


def _read(fd: int) -> dict | None:
    try:
        data = os.pread(fd, 1 << 16, 0)
        info = json.loads(data) if data else None
        return info if isinstance(info, dict) else None
    except (OSError, ValueError):
        return None


def _describe(info: dict | None) -> str:
    if not info:
        return "holder unknown"
    return f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}"
