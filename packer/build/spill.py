"""Chunk tokens handed between worker processes through files in shared memory, not through the main process.

With the tokens inside the task results, each of a unit's tokens crossed the
main process twice: unpickled from the worker that encoded its chunk, then
pickled to the worker that assembles the unit. On the 16-core GPU host that
kept the main process busier than one core can be (2.06 CPU seconds in a
1.67 s run with Llama 3's uint32 ids), so workers waited for it, and the
last unit's chunks took 0.16 s to reach its assembler. Now the encoding
worker writes a chunk's arrays to a file (``put``), its result carries only
their names, and the assembler maps the files (``take``): the main process
handles no token at all.

The folder (``SpillFolder``) lives in /dev/shm where that has room (memory,
as the results were), else in the temporary folder, and is removed when the
build ends, however it ends. One left by a process killed outright is
removed by the next build that starts (its name holds the dead pid).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, replace

import numpy as np

from ..errors import PackerError
from .plan import ChunkResult

PREFIX = "packer-spill-"


@dataclass(frozen=True)
class Spilled:
    """An array written to ``path``: ``size`` elements of ``dtype``, raw."""

    path: str
    dtype: str
    size: int

    def __len__(self) -> int:
        return self.size

    def load(self) -> np.ndarray:
        if not self.size:
            return np.zeros(0, self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.size,))


class SpillFolder:
    """The folder one build's chunk files go to (``remove`` when the build ends).
    ``need_bytes``: the most the files can hold at once (the build's window of units)."""

    def __init__(self, need_bytes: int):
        base = "/dev/shm"
        if not (os.path.isdir(base) and os.access(base, os.W_OK) and shutil.disk_usage(base).free >= 2 * need_bytes):
            base = tempfile.gettempdir()
        _remove_orphans(base)
        self.path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _remove_orphans(base: str) -> None:
    """Remove spill folders of builds whose process is gone (killed before it could clean up)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if name.startswith(PREFIX) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _write(a: np.ndarray, path: str) -> Spilled:
    try:
        with open(path, "wb") as f:
            f.write(memoryview(np.ascontiguousarray(a)).cast("B"))
    except OSError as e:
        raise PackerError(f"cannot write a chunk's tokens to {os.path.dirname(path)} ({e.strerror}): free space "
                          "there (or point TMPDIR elsewhere) and rerun with --resume") from None
    return Spilled(path, str(a.dtype), len(a))


def put(res: ChunkResult, stem: str) -> ChunkResult:
    """``res`` with its arrays (tokens, loss mask, held-out tokens) written to files ``stem``.*."""
    held = put(res.held, stem + ".held") if res.held is not None else None
    mask = _write(res.mask, stem + ".mask") if res.mask is not None else None
    return replace(res, tokens=_write(res.tokens, stem + ".ids"), mask=mask, held=held)


def take(res: ChunkResult) -> ChunkResult:
    """``res`` with its arrays mapped back from their files (zero-copy, read-only)."""
    held = take(res.held) if res.held is not None else None
    mask = res.mask.load() if isinstance(res.mask, Spilled) else res.mask
    return replace(res, tokens=res.tokens.load(), mask=mask, held=held)


def remove(res: ChunkResult) -> None:
    """Delete ``res``'s files (a mapping still open keeps its pages until it is dropped)."""
    for s in (res.tokens, res.mask):
        if isinstance(s, Spilled):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(s.path)
    if res.held is not None:
        remove(res.held)

