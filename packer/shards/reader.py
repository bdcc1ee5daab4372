"""Opening a shard: memory-mapped, checked against the manifest's seq_len and dtype; and the two Arrow
IPC readers ``packer stats`` parses a shard with (``stream_reader``, ``file_reader``), so that only
packer/shards/ reads the format (tests/test_architecture.py)."""

from __future__ import annotations

import pyarrow as pa

from ..errors import ShardError
from .schema import LOSS_MASK, REQUIRED, ipc_problems, loss_mask_type, schema_problems


def open_shard(path: str, seq_len: int, dtype: str) -> pa.Table:
    """Memory-map a shard and check its schema; raise ``ShardError`` if it is damaged."""
    try:
        source = pa.memory_map(path, "r")
        _check_ipc(source.read_buffer(), path)
        source.seek(0)
        table = pa.ipc.open_file(source).read_all()
    except FileNotFoundError:
        raise ShardError(f"{path}: shard is missing") from None
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise ShardError(f"{path}: not a readable Arrow file ({str(e).splitlines()[0]})") from None
    return _checked(table, path, seq_len, dtype)


def open_shard_buffer(data, path: str, seq_len: int, dtype: str) -> pa.Table:
    """``open_shard`` over a shard already in memory, zero-copy.

    ``data`` is any object with the buffer protocol holding the whole file
    (the dataset passes a private, copy-on-write memory map of it); the
    table's buffers point into ``data``. ``path`` only names the shard in errors.
    """
    _check_ipc(data, path)
    try:
        table = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(data))).read_all()
        table.validate()  # buffer sizes against lengths: cheap, catches a cut body
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise ShardError(f"{path}: not a readable Arrow file ({str(e).splitlines()[0]})") from None
    return _checked(table, path, seq_len, dtype)


def stream_reader(f) -> pa.ipc.RecordBatchStreamReader:
    """The IPC stream inside a shard (``f``: a file object positioned after the file's 8-byte magic and
    padding), parsed as it is read: its ``schema``, then its record batches. Arrow errors as raised."""
    return pa.ipc.open_stream(f)


def file_reader(source) -> pa.ipc.RecordBatchFileReader:
    """A shard's footer read (``source``: a buffer or a random-access file): ``num_record_batches``,
    ``schema``, ``get_batch(k)``, each batch's headers read when asked. Arrow errors as raised."""
    return pa.ipc.open_file(source)


def _check_ipc(data, path: str) -> None:
    """The file magic and an uncompressed body (schema.ipc_problems), as ``packer stats`` checks them."""
    problems = ipc_problems(data)
    if problems:
        raise ShardError(f"{path}: {problems[0]}")


def _checked(table: pa.Table, path: str, seq_len: int, dtype: str) -> pa.Table:
    """``table``'s required columns, in the schema's order, then the optional ``loss_mask`` where
    present (checked: fixed_size_list<uint8>[seq_len]); columns a reader does not know are dropped."""
    problems = schema_problems(table.schema, seq_len, dtype)
    if problems:
        raise ShardError(f"{path}: schema does not match manifest: {problems[0]}")
    names = list(REQUIRED)
    i = table.schema.get_field_index(LOSS_MASK)
    if i >= 0:
        if not table.schema.field(i).type.equals(loss_mask_type(seq_len)):
            raise ShardError(f"{path}: column {LOSS_MASK} is {table.schema.field(i).type}, "
                             f"not {loss_mask_type(seq_len)}: shard is corrupt")
        names.append(LOSS_MASK)
    return table.select(names)
