"""Where an export is written: a temp folder beside DEST, renamed into place as a whole at the end.

Every format writes into ``Target.tmp`` (``.tmp-export-*`` in DEST's folder, so the rename stays on one
filesystem); ``commit`` moves the finished files to their names, the one that marks the export complete
last (a folder export is one rename; Megatron's prefix moves its ``.idx`` last, which is what a reader
opens first). A failure or Ctrl-C removes the temp folder; a killed export leaves only a ``.tmp-export-*``
folder, never a file under DEST's names. ``--overwrite`` replaces an earlier export (or an empty
folder), never a folder of anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile

import numpy as np

from ..errors import PackerError
from ..repacking import joined

IOV = 1024  # buffers per writev (Linux's IOV_MAX)
MARK = "packer-export.json"  # in a folder export: what it was made from; what lets --overwrite replace it


class Target:
    """DEST's final paths in commit order (the last one marks the export complete) and the temp folder
    the format writes them into, under the same relative names (``names``)."""

    def __init__(self, dest: str, names: list[str], overwrite: bool):
        self.dest = os.path.abspath(dest)
        self.parent = os.path.dirname(self.dest)
        self.names = names  # basenames, in the folder DEST is in (a folder DEST: one name, itself)
        if not os.path.isdir(self.parent):
            raise PackerError(f"{dest}: its folder {self.parent} does not exist")
        present = [n for n in names if os.path.lexists(os.path.join(self.parent, n))]
        if present and not overwrite:
            raise PackerError(f"{os.path.join(self.parent, present[0])} exists: pass --overwrite to replace it")
        for n in present:
            _replaceable(os.path.join(self.parent, n))
        self.tmp = tempfile.mkdtemp(dir=self.parent, prefix=".tmp-export-")

    def path(self, name: str) -> str:
        """Where the format writes ``name`` (one of ``names``, or a path inside a folder name) now."""
        return os.path.join(self.tmp, name)

    def commit(self) -> None:
        """Old files out of the way (the marker first), new ones renamed in order, the temp folder removed."""
        trash = os.path.join(self.tmp, ".old")
        os.mkdir(trash)
        for n in reversed(self.names):
            old = os.path.join(self.parent, n)
            if os.path.lexists(old):
                os.replace(old, os.path.join(trash, n))
        for n in self.names:
            if os.path.lexists(self.path(n)):
                _fsync_tree(self.path(n))
                os.replace(self.path(n), os.path.join(self.parent, n))
        _fsync_dir(self.parent)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _replaceable(path: str) -> None:
    """An existing DEST that --overwrite may replace: a file, an empty folder, or a folder an export wrote."""
    if os.path.isdir(path) and not os.path.islink(path) and os.listdir(path) \
            and not os.path.exists(os.path.join(path, MARK)):
        raise PackerError(f"{path} is a folder that no packer export wrote: --overwrite replaces only an "
                          "earlier export; remove it yourself or choose another DEST")


def write_mark(where: str, info: dict) -> None:
    """``info`` as JSON: into ``where``/packer-export.json for a folder, else at the path ``where``."""
    with open(os.path.join(where, MARK) if os.path.isdir(where) else where, "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_tree(path: str) -> None:
    """Every file written, on disk before its rename makes it visible."""
    if not os.path.isdir(path):
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        return
    for top, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(top, f), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(top)


class OutFile:
    """A file the export appends arrays to, in order; ``tell`` is its size so far."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self.f = open(path, "wb")
        self.size = 0

    def append(self, arr) -> None:
        view = memoryview(arr).cast("B")
        self.f.write(view)
        self.size += len(view)

    def append_runs(self, runs) -> None:
        """A shard's runs (``repacking.Pieces.tokens``: documents back to back, lying in pieces across the
        mapped shard) written in order straight from where they lie: no copy."""
        self.append_all([memoryview(runs.flat[c][s:s + n]).cast("B")
                         for c, s, n in zip(runs.chunk.tolist(), runs.start.tolist(), runs.length.tolist())])

    def append_all(self, views: list) -> None:
        """Buffers written in order, 1,024 per ``os.writev``."""
        self.f.flush()
        fd = self.f.fileno()
        for i in range(0, len(views), IOV):
            batch = views[i:i + IOV]
            done = os.writev(fd, batch)
            for v in batch:  # a short write (a signal, a full pipe): the rest one buffer at a time
                if done >= len(v):
                    done -= len(v)
                    continue
                v, done = memoryview(v)[done:], 0
                while len(v):
                    v = v[os.write(fd, v):]
            self.size += sum(len(v) for v in batch)

    def append_tokens(self, pieces, dtype: np.dtype) -> None:
        """A shard's documents (``repacking.Pieces``) in ``dtype``: as they lie where the build's dtype is
        that, else joined and converted."""
        if pieces.tokens.flat[0].dtype == dtype:
            self.append_runs(pieces.tokens)
        else:
            self.append(joined(pieces).tokens.astype(dtype))

    def close(self) -> None:
        self.f.close()
