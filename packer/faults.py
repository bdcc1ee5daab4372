"""Fault injection for the reliability tests: crash or fail at a named point.

Set ``PACKER_FAULT=<point>`` (and optionally ``PACKER_FAULT_UNIT=<k>`` to fire
only while unit k is built) in a build's environment. Points:

- ``read``, ``tokenize``, ``pack``, ``write``: inside a unit, after that stage
- ``rename``: inside an atomic write, after the temp file is complete, before the rename
- ``manifest``: before the manifest is written
- ``kill-worker``: SIGKILL this worker process only (tests worker-death handling)
- ``enospc``: an atomic write fails with "No space left on device"
- ``slow``: every chunk takes 2 s longer to tokenize, every shard 2 s longer to check in a ``packer stats
  --workers`` checker (a run long enough to be signalled); with ``PACKER_FAULT_READY=<folder>`` each process
  touches ``<folder>/<pid>`` as it begins such a wait (a test waits for that, not for a guessed time);
  ``PACKER_FAULT_SLOW_S=<seconds>`` waits that long instead (a task in hand that a stop must not wait for)

Any other point kills the whole process group with SIGKILL, as a power cut
would. With the variable unset, ``point`` costs one dict lookup.

The unit being built is a context variable (``in_unit``), not process state:
a point deep inside an atomic write knows its unit without being told, and
two builds in one process (threads) cannot see each other's unit.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import signal
import time

_UNIT: contextvars.ContextVar[int | None] = contextvars.ContextVar("packer_fault_unit", default=None)


@contextlib.contextmanager
def in_unit(index: int):
    """While the block runs, points fire for ``PACKER_FAULT_UNIT=index``."""
    token = _UNIT.set(index)
    try:
        yield
    finally:
        _UNIT.reset(token)


def point(name: str) -> None:
    want = os.environ.get("PACKER_FAULT")
    if want is None or want != name:
        return
    unit = os.environ.get("PACKER_FAULT_UNIT")
    current = _UNIT.get()
    if unit is not None and (current is None or int(unit) != current):
        return
    if name == "slow":
        ready = os.environ.get("PACKER_FAULT_READY")
        if ready:
            with open(os.path.join(ready, str(os.getpid())), "a"):
                pass
        time.sleep(float(os.environ.get("PACKER_FAULT_SLOW_S", "2")))
        return
    if name == "kill-worker":
        os.kill(os.getpid(), signal.SIGKILL)
    if name == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    os.killpg(os.getpgid(0), signal.SIGKILL)
