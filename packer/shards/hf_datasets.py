"""A build as an HF ``datasets.Dataset``, memory-mapped, with no copy.

``hf_dataset("out/")`` gives a ``datasets.Dataset`` whose table is the
build's shards, memory-mapped in place (one ``MemoryMappedTable`` a shard,
concatenated in manifest order): nothing is copied into the datasets cache,
and pickling it (``map(num_proc=...)``, DataLoader workers) sends the shard
paths, not the data.

Why not datasets' own readers: ``Dataset.from_file`` reads the Arrow IPC
*stream* format, and packer writes the IPC *file* format (random access,
what ``pyarrow.ipc.open_file`` and ``torch.from_file`` maps need), so it
fails; ``load_dataset("arrow", data_files=...)`` reads them but writes a
copy of every shard into its cache. The subclass here only swaps the reader
(``pa.ipc.open_file`` over ``pa.memory_map``) and keeps its own class through
datasets' table operations, so a reloaded (unpickled) table reads the file
format too.

Columns: the shard's (``input_ids``, ``doc_lens``, ``doc_index``,
``doc_offset``); ``input_ids`` is fixed_size_list<uint16|uint32>[seq_len].
Local builds only (``PackedDataset`` reads object storage through its cache).
"""

from __future__ import annotations

import os

import pyarrow as pa

from ..errors import PackerError, ShardError
from .manifest import read_manifest
from .reader import open_shard
from .schema import checksum


def _read(path: str) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(path, "r")).read_all()


def hf_dataset(path: str):
    """The local build at ``path`` as a memory-mapped ``datasets.Dataset`` (see the module docstring)."""
    try:
        import datasets
        from datasets.table import ConcatenationTable

        from ._arrow_file_table import ArrowFileTable
    except ImportError as e:
        raise PackerError(f"hf_dataset needs the datasets package (pip install datasets): {e}") from None
    if "://" in str(path):
        raise PackerError(f"{path}: hf_dataset reads local builds; download the build first, or use PackedDataset")
    m = read_manifest(path)
    if not m["shards"]:
        raise ShardError(f"{path}: the build has no shards")
    tables = []
    for sh in m["shards"]:
        f = os.path.join(path, sh["path"])
        open_shard(f, int(m["seq_len"]), m["dtype"])  # one clear ShardError if missing or damaged
        tables.append(ArrowFileTable.from_file(f))
    table = tables[0] if len(tables) == 1 else ConcatenationTable.from_tables(tables)
    # the fingerprint from the shards' checksums: datasets would otherwise hash the whole table
    digest = checksum("\n".join(f"{sh['path']} {sh.get('xxh3_128', '')}" for sh in m["shards"]).encode())
    return datasets.Dataset(table, info=datasets.DatasetInfo(description=f"packer build {path}"),
                            fingerprint=f"packer-{digest[:32]}")
