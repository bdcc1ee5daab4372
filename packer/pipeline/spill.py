"""Chunk data handed between processes through files in shared memory, not through pipes and the main process.

With the tokens inside the task results, each of a unit's tokens crossed the
main process twice: unpickled from the worker that encoded its chunk, then
pickled to the worker that assembles the unit. On the 16-core GPU host that
kept the main process busier than one core can be (2.06 CPU seconds in a
1.67 s run with Llama 3's uint32 ids), so workers waited for it, and the
last unit's chunks took 0.16 s to reach its assembler. Now the encoding
worker writes a chunk's arrays to a file (``put``), its result carries only
their names, and the assembler maps the files (``take``): the main process
handles no token at all.

A chunk's input goes the same way (``put_parts``): pickled into a file by
the reader thread, read back whole by the worker. Through the task pipe it
came in 64 KB writes, each waiting for the main process's GIL: workers
waited 3 ms between 256 KB chunks on the GPU host (32 ms with 1 MB chunks).

The folder (``SpillFolder``) lives in ``$PACKER_SPILL_DIR`` if set, else in
/dev/shm where that has room (memory, as the results were), else in the
temporary folder, and is removed when the build ends, however it ends. One
left by a process killed outright is removed by the next build that starts
(the lock the dead build held is free).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass, replace

import numpy as np

from ..errors import PackerError
from ..io import LOCK_NAME, OutLock
from .plan import ChunkResult

PREFIX = "packer-spill-"
LOCK = LOCK_NAME  # the lock file a live build holds in its spill folder


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
        try:
            # a plain ndarray over the map: slicing a np.memmap runs its Python __getitem__ and
            # __array_finalize__ per slice, 0.5 CPU-s per GB of text in the assembler's per-piece copies
            return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.size,)).view(np.ndarray)
        except (OSError, ValueError) as e:  # ValueError: the file is shorter than written
            raise _gone(self.path, e) from None


class SpillFolder:
    """The folder one build's chunk files go to (``remove`` when the build ends).
    ``need_bytes``: the most the files can hold at once (the build's window of units).

    The build holds an exclusive ``flock`` on its lock file (``io.lock.OutLock``) inside it while it runs: the kernel
    drops it when the process (and its workers) are gone, however they went, so another build
    can tell an orphan from a live folder even across containers that share /dev/shm but not
    their process ids."""

    def __init__(self, need_bytes: int):
        base = os.environ.get("PACKER_SPILL_DIR") or "/dev/shm"
        if "PACKER_SPILL_DIR" not in os.environ and not (
                os.path.isdir(base) and os.access(base, os.W_OK) and shutil.disk_usage(base).free >= 2 * need_bytes):
            base = tempfile.gettempdir()
        _remove_orphans(base)
        try:
            self.path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)
            self._lock = OutLock(self.path).acquire()  # OUT's lock: the same flock, its file inside the folder
        except OSError as e:
            raise PackerError(f"cannot make the build's spill folder in {base} ({e.strerror}): "
                              "set PACKER_SPILL_DIR to a writable folder") from None

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.release(True)


def _orphaned(folder: str) -> bool:
    """True if no live build holds ``folder``'s lock. A folder without one (being made, or
    where there is no flock) is never judged an orphan."""
    try:
        import fcntl

        fd = os.open(os.path.join(folder, LOCK), os.O_RDWR)
    except (ImportError, OSError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:  # held: its build runs
        return False
    finally:
        os.close(fd)


def _remove_orphans(base: str) -> None:
    """Remove spill folders of builds that are gone (killed before they could clean up)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        path = os.path.join(base, name)
        if name.startswith(PREFIX) and _orphaned(path):
            shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class SpilledParts:
    """A chunk's input (its ``Part``s), pickled to ``path``; ``load`` reads it back and removes the file."""

    path: str

    def load(self) -> list:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            os.unlink(self.path)
        except OSError as e:
            raise _gone(self.path, e) from None
        return pickle.loads(data)


def _gone(path: str, e: Exception) -> PackerError:
    why = getattr(e, "strerror", None) or str(e)
    return PackerError(f"chunk file {path} cannot be read back ({why}): was the spill folder cleaned while the "
                       "build ran? Finished units are kept: rerun with --resume")


def put_parts(parts: list, path: str) -> SpilledParts:
    """Write a chunk's input to ``path`` (the reader thread, for a pool worker)."""
    _put_bytes(pickle.dumps(parts, protocol=pickle.HIGHEST_PROTOCOL), path, "input")
    return SpilledParts(path)


def _put_bytes(data, path: str, what: str) -> None:
    try:  # os.write, no file object: open() cost 0.18 ms a chunk file here, as much as writing its 300 KB
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0), 0o600)
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as e:
        raise PackerError(f"cannot write a chunk's {what} to {os.path.dirname(path)} ({e.strerror}): free space "
                          "there, or set PACKER_SPILL_DIR to a folder with room, and rerun with --resume") from None


def _write(a: np.ndarray, path: str) -> Spilled:
    _put_bytes(memoryview(np.ascontiguousarray(a)).cast("B"), path, "tokens")
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

