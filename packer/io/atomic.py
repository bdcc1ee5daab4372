"""Atomic, umask-honouring writes of local files (the build's every file goes through ``atomic_write``)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

from .. import faults
from ..errors import PackerError


def json_bytes(obj) -> bytes:
    """JSON as packer writes it, on every store (so all stores hold the same bytes)."""
    return (json.dumps(obj, indent=1, sort_keys=False) + "\n").encode()


def _read_umask() -> int:
    """The process umask, by setting it and back: done once, at import (it is
    not thread-safe, and at import time no other packer thread runs)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _umask() -> int:
    """The umask now: Linux shows it in /proc (one small read per file written); elsewhere the one at import."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return _UMASK


def atomic_write(path: str, data) -> None:
    """Write ``data`` to the local ``path`` so that a reader sees all of it or nothing.

    The file gets mode 0666 less the umask, as ``open`` would give it (0644
    under 022): ``mkstemp`` makes it 0600, which another user or a training
    job under another uid cannot read.
    """
    folder = os.path.dirname(path) or "."
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix="-" + os.path.basename(path))
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            faults.point("enospc")
        faults.point("rename")
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(e, OSError):
            # Disk full, quota, read-only mount, I/O error: nothing half-written is left.
            raise PackerError(
                f"cannot write {path}: {e.strerror or e}; nothing partial was kept: "
                "fix the cause and rerun with --resume"
            ) from None
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_json(path: str, obj) -> None:
    """``obj`` as JSON at the local ``path``, atomically."""
    atomic_write(path, json_bytes(obj))
