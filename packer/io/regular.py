"""Opening a local file that must be a regular file, without ever blocking.

A FIFO put in a file's place would block ``open`` until a writer comes (forever), and
``/dev/zero`` never ends: every local reader of a build's files (the manifest, index.arrow,
shards) opens them here. ``O_NONBLOCK`` makes the open of a FIFO return at once; the ``fstat``
of the open descriptor then refuses anything but a regular file (no race with a stat of the
path). On a regular file O_NONBLOCK changes nothing.
"""

from __future__ import annotations

import errno
import os
import stat

FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def open_regular(path: str) -> tuple[int, int]:
    """(fd, size) of ``path`` opened read-only; ``OSError`` (EINVAL, "not a regular file") for a FIFO,
    a device or a folder (closed first), ``FileNotFoundError`` when absent. The caller closes fd."""
    fd = os.open(path, FLAGS)
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd, st.st_size
