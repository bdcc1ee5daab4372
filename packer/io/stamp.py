"""Input stamps: what ``--resume`` compares to tell whether an input changed since the build began.

Each input found gets ``(mtime_ns, inode, content)`` (``Found.stamps``, then
``packer.formats.InputFile.stamp``):

- ``mtime_ns``, ``inode``: from discovery's one ``stat`` (an object: its
  modification time and 0);
- ``content``: something derived from the bytes, at a bounded cost: locally the
  xxh3_128 of the whole file when it is at most ``WHOLE_BYTES`` (one read), or of
  three ``BLOCK`` blocks (head, middle, tail; three reads) of a larger one; on
  S3 the object's ETag (from the listing, no extra request). "" where nothing
  could be had (an unreadable file, a store without ETags).

``digest(files)`` hashes every part (the stamp kept in the lock while a build
runs); ``digest(files, content_only=True)`` only the path, size and content:
the same for a copy of the corpus (other times and inodes, same bytes), so it can
be recorded in build.json without changing its bytes between copies.

What it cannot see: an edit of a file over ``WHOLE_BYTES`` outside its three
blocks that keeps the size, when its modification time and inode are also put
back (or in a copied OUT, where only the content part is on record); an object
rewritten with the same bytes (same ETag: nothing to see); on a store without
ETags, a rewrite within the same second of the same size. (The first is caught
later, where a finished unit read the edit: each unit record keeps the hash
of the bytes it read, packer/formats/consumed.py, and ``--resume`` checks it.)
"""

from __future__ import annotations

import hashlib
import os
import stat

WHOLE_BYTES = 1 << 20  # a file up to this size is hashed whole (one read)
BLOCK = 64 << 10  # else: this much at its start, middle and end


def file_content(path: str, size: int) -> str:
    """The content part of a local file's stamp ("" if it cannot be read)."""
    import xxhash

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced by a FIFO or a device since the stat: never read
            return ""
        h = xxhash.xxh3_128()
        if size <= WHOLE_BYTES:
            h.update(os.read(fd, size + 1))  # one read; a byte more than found: a file that grew hashes otherwise
        else:
            for off in (0, size // 2 - BLOCK // 2, size - BLOCK):
                h.update(os.pread(fd, BLOCK, off))
        return h.hexdigest()
    except OSError:
        return ""
    finally:
        os.close(fd)


def digest(files, content_only: bool = False) -> str:
    """A hex digest of the stamps of ``files`` (anything with ``path``, ``size``, ``stamp``)."""
    h = hashlib.sha256()
    for f in files:
        st = tuple(f.stamp) + ("",) * (3 - len(f.stamp))
        parts = (f.path, f.size, st[2]) if content_only else (f.path, f.size, *st)
        h.update(("\0".join(map(str, parts)) + "\n").encode("utf-8", "surrogateescape"))
    return h.hexdigest()


LISTED = 1000  # inputs whose stamps a lock lists (in input order), so --resume can name the one that changed


def listing(files, limit: int = LISTED) -> dict:
    """The stamps of the first ``limit`` of ``files`` by name, for the lock (``first_change`` reads it):
    {"files": [[path, size, mtime_ns, inode, content], ...], "complete": whether that is all of them}."""
    rows = []
    for f in files[:limit]:
        st = tuple(f.stamp) + ("",) * (3 - len(f.stamp))
        rows.append([f.path, f.size, *st[:3]])
    return {"files": rows, "complete": len(files) <= limit}


def first_change(before, files) -> str | None:
    """How the inputs ``files`` differ from ``before`` (a ``listing``), said of the first that does:
    "a.jsonl: its size was 10 bytes, now 12", "... its content changed at the same size", "... is new",
    "... is gone"; None where ``before`` is not a listing or no listed file differs."""
    if not isinstance(before, dict) or not isinstance(before.get("files"), list):
        return None
    old = {e[0]: e for e in before["files"] if isinstance(e, list) and len(e) == 5}
    for f in files:
        e = old.pop(f.path, None)
        if e is None:
            if before.get("complete"):
                return f"{f.path} is new"
            continue
        st = tuple(f.stamp) + ("",) * (3 - len(f.stamp))
        if e[1] != f.size:
            return f"{f.path}: its size was {e[1]:,} bytes, now {f.size:,}"
        if e[4] != st[2]:
            return f"{f.path}: its content changed at the same size"
        if e[2] != st[0]:
            return f"{f.path}: its modification time changed (same size)"
        if e[3] != st[1]:
            return f"{f.path}: it is another file now (other inode, same size)"
    if old:
        return f"{next(iter(old))} is gone"
    return None
