"""Shards: the on-disk format (docs/format.md is the contract).

A build folder holds ``manifest.json`` (written last), ``shards/*.arrow``
(Arrow IPC files, uncompressed, one row per packed sequence) and
``units/*.json`` (one record per finished work unit, which is what
``--resume`` trusts). Every file is written atomically (packer/io).
``schema`` defines a shard, ``manifest`` reads the manifest, ``index``
writes and reads ``index.arrow`` (the shard list as columns, beside the
manifest: what opening a build of a million shards reads), ``reader``
opens a shard as a table; ``mapped`` (through its Arrow footer) and
``shard_file`` (by index.arrow's row layout) give NumPy views of a mapped
shard's rows, and ``checks`` holds the checks every reader makes (the
dataset, ``packer show``, ``packer stats``). Only this package reads or
writes Arrow IPC (tests/test_architecture.py holds the rule).

The columns of a shard are listed in schema.py and docs/format.md.
"""

from .index import INDEX, ShardIndex, damaged_index, index_table, open_index, reindex, write_manifest
from .checks import boundary_problem, head_schema, row_used, schema_problems_of, shard_fd
from .manifest import parse_manifest, read_manifest, read_manifest_bytes
from .manifest_stream import ManifestStream
from .mapped import Mapped, check_layout, map_shard
from .reader import file_reader, open_shard, open_shard_buffer, stream_reader
from .shard_file import FAST as READ_BY_LAYOUT, ShardFile
from .schema import (BUILD_JSON, CHECKSUM, FORMAT_NAME, FORMAT_VERSION, LOSS_MASK, MANIFEST, REQUIRED, SHARD_DIR, UNIT_DIR,
                     checksum, dtype_for_vocab, file_checksum, ipc_problems, loss_mask_type, schema, schema_problems,
                     shard_table, table_bytes)

__all__ = [
    "read_manifest", "read_manifest_bytes", "parse_manifest", "write_manifest", "open_index", "index_table", "ShardIndex", "INDEX", "damaged_index", "open_shard", "open_shard_buffer", "stream_reader", "file_reader", "BUILD_JSON", "CHECKSUM", "LOSS_MASK", "FORMAT_NAME", "FORMAT_VERSION",
    "MANIFEST", "REQUIRED", "SHARD_DIR", "UNIT_DIR", "checksum", "dtype_for_vocab", "file_checksum", "ipc_problems",
    "loss_mask_type", "schema",
    "schema_problems", "shard_table", "table_bytes", "boundary_problem", "head_schema", "row_used", "schema_problems_of",
    "shard_fd", "ManifestStream", "reindex", "Mapped", "check_layout", "map_shard", "READ_BY_LAYOUT", "ShardFile",
]
