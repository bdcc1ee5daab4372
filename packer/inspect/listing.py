"""The files of a build for ``packer stats``, in memory that does not hold a name per shard: the names
the manifest accounts for kept as sorted 64-bit hashes (8 bytes a name, in NumPy), a local folder's
files walked one directory entry at a time (``os.scandir``), a shard's size by one ``stat``. An
object store is listed once (one paginated LIST: a dict of its keys, the one per-object cost left)."""

from __future__ import annotations

import os
import posixpath
import stat
from array import array

import numpy as np
import xxhash

from .. import shards as S
from .report import Problem


def _h(name: str) -> int:
    return xxhash.xxh3_64_intdigest(name.encode("utf-8", "surrogatepass"))


class Names:
    """The file names a build's manifest accounts for: its own files, each shard, each unit's record."""

    def __init__(self):
        self._hashes = array("Q", (_h(n) for n in (S.MANIFEST, S.BUILD_JSON, S.INDEX)))
        self._sorted = None

    def add_entry(self, e: dict) -> None:
        self._hashes.append(_h(posixpath.normpath(e["path"])))
        if e.get("unit") is not None:
            self._hashes.append(_h(f"{S.UNIT_DIR}/{int(e['unit']):06d}.json"))

    def __contains__(self, name: str) -> bool:
        if self._sorted is None:
            self._sorted = np.sort(np.frombuffer(self._hashes, np.uint64))
            self._hashes = array("Q")
        h = np.uint64(_h(name))
        i = int(np.searchsorted(self._sorted, h))
        return i < len(self._sorted) and self._sorted[i] == h


def size(store, objects: dict | None, rel: str) -> int | None:
    """The size of file ``rel`` of the build (None: no such file); ``objects``: an object store's listing."""
    if objects is not None:
        return objects.get(posixpath.normpath(rel))
    try:
        st = os.stat(store.path(rel))
    except (OSError, ValueError):
        return None
    return None if stat.S_ISDIR(st.st_mode) else st.st_size


def _files(root: str, rel: str = ""):
    """Every file below ``root`` (as ``os.walk`` finds them: symlinked folders not entered, names that
    cannot be stat'ed left out), "/"-separated, one directory entry at a time."""
    try:
        it = os.scandir(os.path.join(root, rel) if rel else root)
    except OSError:
        return
    with it:
        for d in it:
            name = f"{rel}/{d.name}" if rel else d.name
            try:
                if d.is_dir():
                    if not d.is_symlink():
                        yield from _files(root, name)
                    continue
                os.stat(d.path)
            except OSError:
                continue
            yield name


def extra_files(store, objects: dict | None, known: Names, skip: str | None = None) -> list[Problem]:
    """Files of the build that the manifest does not account for, sorted by name; ``skip``: a folder
    checked as a build of its own (the holdout)."""
    rels = objects if objects is not None else _files(store.root) if os.path.isdir(store.root) else ()
    found = []
    for rel in rels:
        if (skip is None or not rel.startswith(skip + "/")) and rel not in known:
            why = "a temp file of an interrupted write" if posixpath.basename(rel).startswith(".tmp-") else "not in the manifest"
            found.append(Problem(rel, "extra", f"extra file: {why}"))
    return sorted(found, key=lambda p: p.path)
