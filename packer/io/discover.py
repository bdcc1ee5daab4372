"""Finding input files: folders (recursively, sorted), files, globs and object-store prefixes.

``find`` turns the user's paths into the files to read, with their sizes, in
a deterministic order; what counts as an input is the caller's ``accepts``
(the format registry). Local trees are walked with one ``scandir`` per
folder, and one ``stat`` and one to three reads per file (its content stamp,
packer/io/stamp.py), many at once (on a network mount each is a round trip);
a prefix on an object store is one recursive listing (two at once on S3:
pyarrow's, and boto3's for the ETags).
"""

from __future__ import annotations

import errno
import glob as globlib
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import PackerError
from . import s3
from .stamp import file_content
from .storage_base import _io_error
from .uri import filesystem, is_uri, join, redact

STAT_THREADS = 32  # stats in flight while sizing a local tree


@dataclass(frozen=True)
class Found:
    files: tuple[tuple[str, int], ...]  # (path as given or found, bytes), in reading order
    ignored: tuple[str, ...]  # files inside folders that ``accepts`` refused
    duplicates: tuple[str, ...]  # paths given more than once (read once)
    # (modification time in ns, inode, content) of each of ``files``: from the same stat, and the
    # xxh3 of its bytes (an object: its mtime, 0, its ETag); what ``--resume`` compares to see an
    # edit (packer/io/stamp.py says what it can and cannot see).
    stamps: tuple[tuple[int, int, str], ...] = ()
    special: tuple[str, ...] = ()  # names in folders that are not regular files (FIFOs, devices, sockets): not read


def check_name(p: str) -> None:
    """Refuse a path that cannot be written as text (a name not valid UTF-8,
    held by Python as surrogate escapes): every record names its file."""
    try:
        p.encode("utf-8")
    except UnicodeEncodeError:
        shown = p.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise PackerError(f"input file name is not valid UTF-8: {shown!r}; rename it (packer records every input by name)") from None


def find(paths: list[str], accepts, unknown, exclude: str | None = None, on_sized=None) -> Found:
    """The input files under ``paths``, in the order given (each folder sorted as paths: a/sub/x before b).

    ``accepts(path)``: whether a file is an input; ``unknown(path)``: the
    error for a file named explicitly that is not. ``exclude`` is a folder
    (or prefix) never read from: the output, when it sits inside an input.
    Names starting with "." are skipped; a symlinked folder is not entered.
    ``on_sized(done, total)`` is called as local files are sized.
    """
    items: list[tuple[str, str | None, int | None]] = []  # (path, real path or key, size if known)
    ignored: list[str] = []
    special: list[str] = []
    ex_local = os.path.realpath(exclude).rstrip(os.sep) if exclude and not is_uri(exclude) else None
    ex_uri = exclude if exclude and is_uri(exclude) else None
    for p in paths:
        if is_uri(p):
            items.extend((f, f, fact) for f, fact in _find_uri(p, accepts, unknown, ex_uri, ignored))
        else:
            items.extend((f, real, None) for f, real in _find_local(p, accepts, unknown, ex_local, ignored, special))
    local = [(p, real) for p, real, size in items if size is None]
    facts = {}
    # One stat per file, asked by many threads at once: on a mount where each
    # call waits (network, FUSE) a tree of many small files would otherwise
    # pay every round trip in series.
    with ThreadPoolExecutor(STAT_THREADS, thread_name_prefix="packer-stat") as pool:
        for i, fact in enumerate(pool.map(_file_facts, local)):
            facts[i] = fact
            if on_sized is not None and ((i + 1) % 256 == 0 or i + 1 == len(local)):
                on_sized(i + 1, len(local))
    files, stamps, seen, dups, k = [], [], set(), [], 0
    for p, real, known in items:
        if known is None:
            real, size, err, readable, stamp, regular = facts[k]
            k += 1
            if real in seen:
                dups.append(p)
                continue
            seen.add(real)
            if ex_local is not None and (real == ex_local or real.startswith(ex_local + os.sep)):
                continue
            if err is not None:
                raise PackerError(f"cannot read input {p}: {err.strerror}")
            if not regular:
                # A FIFO blocks forever, /dev/zero never ends: only regular files are read.
                special.append(p)
                continue
            if not readable:
                raise PackerError(f"cannot read input {p}: permission denied")
        else:
            size, stamp = known
            if real in seen:
                dups.append(p)
                continue
            seen.add(real)
        check_name(p)
        files.append((p, size))
        stamps.append(stamp)
    return Found(tuple(files), tuple(ignored), tuple(dups), tuple(stamps), tuple(special))


def _find_local(p: str, accepts, unknown, ex_real: str | None, ignored: list[str],
                special: list[str]) -> list[tuple[str, str | None]]:
    if any(ch in p for ch in "*?["):
        matches = sorted(globlib.glob(p, recursive=True))
        if not matches:
            raise PackerError(f"input glob matches nothing: {p}")
        found = []
        for m in matches:
            if os.path.isdir(m):
                found.extend(_walk(m, accepts, ignored, ex_real, special))
            elif accepts(m):
                found.append((m, None))
            else:
                ignored.append(m)
        return found
    if os.path.isdir(p):
        return _walk(p, accepts, ignored, ex_real, special)
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PackerError(f"cannot read input {p}: a symlink loop ({e.strerror})") from None
    if os.path.exists(p):
        if not accepts(p):
            raise unknown(p)
        return [(p, None)]
    if os.path.islink(p):
        raise PackerError(f"input is a broken symlink: {p}")
    raise PackerError(f"input not found: {p}")


def _find_uri(uri: str, accepts, unknown, exclude: str | None, ignored: list[str]) -> list[tuple[str, tuple]]:
    """A URI naming an object is one input file; a URI naming a prefix holds
    every object below it (recursively; names starting with "." skipped).
    Globs are not expanded on object storage."""
    import pyarrow.fs as pafs  # here, not at the top: its S3/GCS/Azure modules take ~60 ms to load

    if any(ch in uri for ch in "*?["):
        raise PackerError(f"input globs are not expanded on object storage: {redact(uri)}; name a prefix instead")
    fs, path = filesystem(uri)
    try:
        info = fs.get_file_info(path)
    except OSError as e:
        raise _io_error("list", uri, e) from None
    if info.type == pafs.FileType.File:
        if not accepts(uri):
            raise unknown(uri)
        return [(uri, (info.size, (info.mtime_ns or 0, 0, s3.head_etag(uri))))]
    if info.type != pafs.FileType.Directory:
        raise PackerError(f"input not found: {uri}")
    with ThreadPoolExecutor(1, thread_name_prefix="packer-etags") as pool:
        tags = pool.submit(s3.etags, uri)  # S3's listing has the ETags pyarrow's drops: asked at the same time
        try:
            listing = fs.get_file_info(pafs.FileSelector(path, recursive=True))
        except OSError as e:
            raise _io_error("list", uri, e) from None
        etags = tags.result() or {}
    base = path.rstrip("/")
    ex = exclude.rstrip("/") + "/" if exclude else None
    out = []
    for i in listing:
        if i.type != pafs.FileType.File:
            continue
        rel = i.path[len(base):].lstrip("/")
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        full = join(uri, rel)
        if ex is not None and (full + "/").startswith(ex):
            continue
        if accepts(full):
            out.append((full, (i.size, (i.mtime_ns or 0, 0, etags.get(full, "")))))
        else:
            ignored.append(full)
    return sorted(out, key=lambda f: f[0].split("/"))  # as a local tree is sorted: a/sub/x before b


def _file_facts(item: tuple[str, str | None]) -> tuple[str, int, OSError | None, bool, tuple[int, int, str], bool]:
    """(real path, size, error getting the size, readable, (mtime_ns, inode, content), regular file)
    of one input file, from one ``stat`` and the reads of ``stamp.file_content`` (and a ``realpath``
    only where the walk did not know it)."""
    path, real = item
    try:
        st = os.stat(path)
        size, err = st.st_size, None
    except OSError as e:
        size, err, st = -1, e, None
    # The mode bits answer for the usual case; os.access (a call to the file
    # server on a network mount) only confirms a file they say is unreadable.
    readable = err is None and (_mode_readable(st) or os.access(path, os.R_OK))
    regular = st is not None and stat.S_ISREG(st.st_mode)
    content = file_content(path, size) if regular and readable else ""
    stamp = (st.st_mtime_ns, st.st_ino, content) if st is not None else (0, 0, "")
    try:
        real = real or os.path.realpath(path)
    except (OSError, ValueError):
        real = path
    return real, size, err, readable, stamp, regular


def _mode_readable(st: os.stat_result) -> bool:
    """Whether the permission bits let this process read: False where they say no,
    or where there are no POSIX ids to compare (then os.access decides)."""
    if not hasattr(os, "geteuid"):
        return False
    uid = os.geteuid()
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IRUSR)
    if st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


def _walk(folder: str, accepts, ignored: list[str], ex_real: str | None,
          special: list[str] | None = None) -> list[tuple[str, str | None]]:
    """(path, real path) of the input files under ``folder``, sorted as paths
    (a/sub/x before b). Names starting with "." are skipped, and a symlinked
    folder is not entered (so loops cannot occur). The real path comes from
    the folder's, resolved once, except for a file that is itself a symlink
    (None: resolved later): no per-file ``realpath``, which is a metadata
    call per path component on a network mount. ``ex_real``: the real path
    of a folder not to enter (the output)."""
    out = []

    def add(path: str, real: str | None) -> None:
        if accepts(path):
            out.append((path, real))
        else:
            ignored.append(path)

    todo = [(folder, os.path.realpath(folder))]  # (folder, its real path): a walked subfolder is never a symlink
    while todo:
        root, real_root = todo.pop()
        if ex_real is not None and (real_root == ex_real or real_root.startswith(ex_real + os.sep)):
            continue
        try:
            with os.scandir(root) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue  # an unreadable folder is skipped, as os.walk does
        subdirs = []
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    subdirs.append((e.path, os.path.join(real_root, e.name)))
                elif not e.is_symlink():
                    if e.is_file(follow_symlinks=False):
                        add(e.path, os.path.join(real_root, e.name))
                    elif special is not None and accepts(e.path):
                        special.append(e.path)  # a FIFO, socket or device: never opened
                    else:
                        ignored.append(e.path)
                elif not e.is_dir():  # a symlinked file: resolved later; a symlinked folder is not entered
                    add(e.path, None)
            except OSError:  # ELOOP and the like: the stat in _file_facts names it
                add(e.path, None)
        todo.extend(reversed(subdirs))
    return sorted(out, key=lambda p: p[0].split(os.sep))

