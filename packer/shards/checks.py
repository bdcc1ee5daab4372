"""The checks every reader of a shard makes, written once: the dataset's two readers (mapped.py,
shard_file.py), ``packer show`` and ``packer stats`` (packer/inspect/) call these.

- ``shard_fd``: a local shard opened without blocking, a regular file of the manifest's size;
- ``head_schema`` / ``schema_problems_of``: the ARROW1 magic and the schema message at the file's
  start (what an IPC stream reader such as ``packer stats`` or ``datasets`` parses), and the one
  schema rule (required columns by name and type, ``loss_mask`` typed, present in a chat build);
- ``row_used`` / ``boundary_problem``: a batch's doc_lens offsets in order, pieces of 1..seq_len
  slots, rows that sum to at most seq_len (every offset is checked before NumPy follows it).

Each check returns a problem (one line, without the file's name) or raises ``ShardError`` naming
the file: a damaged shard is one line, never a traceback.
"""

from __future__ import annotations

import errno
import os

import numpy as np
import pyarrow as pa

from ..errors import ShardError
from ..io import open_regular
from .schema import LOSS_MASK, MAGIC, loss_mask_type, schema_problems

HEAD = 16  # magic (6), padding (2), continuation (4), the schema message's length (4)


def shard_fd(path: str, nbytes: int) -> int:
    """A read-only descriptor of the local shard ``path`` (never blocks: packer/io/regular.py), checked to
    be a regular file of ``nbytes`` bytes; else ``ShardError`` naming it. The caller closes it."""
    try:
        fd, size = open_regular(path)
    except FileNotFoundError:
        raise ShardError(f"{path}: shard is missing") from None
    except OSError as err:
        if err.errno == errno.EINVAL and err.strerror == "not a regular file":
            raise ShardError(f"{path}: not a regular file (a FIFO, device or folder): shard is corrupt") from None
        raise ShardError(f"{path}: cannot read shard ({err.strerror})") from None
    if size != nbytes:
        os.close(fd)
        what = "truncated" if size < nbytes else "longer than the manifest says"
        raise ShardError(f"{path}: shard is {what} ({size} bytes, manifest says {nbytes})")
    return fd


def schema_extent(first) -> int:
    """Where the schema message at the start of an IPC file ends, from its first ``HEAD`` bytes;
    ``ValueError`` (the reason) without the ARROW1 magic or with an impossible length."""
    first = bytes(first[:HEAD])
    if len(first) < HEAD or first[:6] != MAGIC:
        raise ValueError("not an Arrow IPC file (no ARROW1 magic at the start)")
    if first[8:12] != b"\xff\xff\xff\xff":
        raise ValueError("not a readable Arrow file (no schema message after the magic)")
    n = int.from_bytes(first[12:16], "little", signed=True)
    if not 0 < n <= 1 << 24:
        raise ValueError(f"not a readable Arrow file (a schema message of {n} bytes)")
    return HEAD + n


def head_schema(head) -> pa.Schema:
    """The schema message at the file's start (``head``: its first ``schema_extent`` bytes or more);
    ``ValueError`` (the reason) if it is not one."""
    end = schema_extent(head)
    if len(head) < end:
        raise ValueError("not a readable Arrow file (cut in its schema message)")
    try:
        msg = pa.ipc.read_message(pa.py_buffer(bytes(head[8:end])))
        if msg.type != "schema":
            raise ValueError(f"not a readable Arrow file (a {msg.type} message where the schema belongs)")
        return pa.ipc.read_schema(msg)
    except (pa.ArrowException, OSError) as e:  # (a flipped type id gives ArrowNotImplementedError)
        raise ValueError(f"not a readable Arrow file ({str(e).splitlines()[0]})") from None


def schema_problems_of(got: pa.Schema, seq_len: int, dtype: str, needs_mask: bool = False) -> list[str]:
    """``schema_problems`` (the required columns), then a ``loss_mask`` column of another type, then a
    chat build's shard (``needs_mask``) without one: what every reader refuses, as one line each."""
    problems = [f"schema does not match manifest: {p}" for p in schema_problems(got, seq_len, dtype)]
    i = got.get_field_index(LOSS_MASK)
    if i >= 0 and not got.field(i).type.equals(loss_mask_type(seq_len)):
        problems.append(f"column {LOSS_MASK} is {got.field(i).type}, not {loss_mask_type(seq_len)}: shard is corrupt")
    if needs_mask and i < 0:
        problems.append(f"no {LOSS_MASK} column, but the manifest says this is a chat build "
                        "(it would train on every token): shard is corrupt")
    return problems


def row_used(offsets: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """(n,) int64: the slots each row's pieces fill (``offsets`` (n + 1,) from 0 into ``lens`` (P,))."""
    cum = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cum[1:])
    return cum[offsets[1:]] - cum[offsets[:-1]]


def boundary_problem(offsets: np.ndarray, n_values: int, lens: np.ndarray | None, seq_len: int,
                     row0: int = 0, column: str = "doc_lens") -> str | None:
    """The first thing wrong with a batch's doc_lens, or None: ``offsets`` ((n + 1,) int64, as stored)
    in order and within the ``n_values`` values; then (``lens``: the values they span, offsets[0]..)
    every piece of 1..seq_len slots and every row summing to at most seq_len (``row0``: the batch's
    first row, for the message; ``column``: the list column the offsets are of)."""
    if len(offsets) and (offsets[0] < 0 or np.any(np.diff(offsets) < 0) or offsets[-1] > n_values):
        return f"{column} offsets are out of order: shard is corrupt"
    if lens is None:
        return None
    if len(lens) and (lens.min() < 1 or lens.max() > seq_len):
        return f"a doc_lens entry is outside 1..{seq_len}: shard is corrupt"
    used = row_used(offsets - offsets[0], lens)
    if len(used) and used.max() > seq_len:
        r = int(np.argmax(used > seq_len))
        return f"row {r + row0}'s doc_lens sum to {int(used[r])} > seq_len {seq_len}: shard is corrupt"
    return None
