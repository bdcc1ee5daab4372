"""Shards: the on-disk format (docs/format.md is the contract).

A build folder holds ``manifest.json`` (written last), ``shards/*.arrow``
(Arrow IPC files, uncompressed, one row per packed sequence) and
``units/*.json`` (one record per finished work unit, which is what
``--resume`` trusts). Every file is written atomically (packer/io).
``schema`` defines a shard, ``manifest`` reads the manifest, ``reader``
opens a shard.

Columns of a shard, one row per packed sequence of ``seq_len`` slots:

- ``input_ids``: fixed_size_list<uint16|uint32>[seq_len]
- ``doc_lens``: list<uint32>, the lengths of the document pieces in the row,
  in order; slots after their sum are padding (``pad_id``)
- ``doc_index``: list<uint32>, per piece, the document's index in its unit
- ``doc_offset``: list<uint32>, per piece, its first token within the document
"""

from .manifest import read_manifest
from .reader import open_shard, open_shard_buffer
from .schema import (BUILD_JSON, CHECKSUM, FORMAT_NAME, FORMAT_VERSION, LOSS_MASK, MANIFEST, REQUIRED, SHARD_DIR, UNIT_DIR,
                     checksum, dtype_for_vocab, loss_mask_type, file_checksum, schema, schema_problems, shard_table, table_bytes)

__all__ = [
    "read_manifest", "open_shard", "open_shard_buffer", "BUILD_JSON", "CHECKSUM", "LOSS_MASK", "FORMAT_NAME", "FORMAT_VERSION",
    "MANIFEST", "REQUIRED", "SHARD_DIR", "UNIT_DIR", "checksum", "dtype_for_vocab", "loss_mask_type", "file_checksum", "schema",
    "schema_problems", "shard_table", "table_bytes",
]
