"""MosaicML streaming: MDS shards (``DEST/index.json`` + ``DEST/shard.00000.mds`` ...) of the build's packed rows.

One sample per packed row, written as mosaicml-streaming 0.13's ``MDSWriter`` writes it (without importing
it: it pins numpy < 2.2): columns, in sorted order, ``doc_lens`` (``ndarray:uint32``, the row's piece
lengths), ``input_ids`` (``ndarray:<dtype>:<seq_len>``, the row as stored, padding included) and, in a chat
build, ``loss_mask`` (``ndarray:uint8:<seq_len>``). A shard file is

    <u4 samples n | <u4 offsets[n + 1] (from the file's start) | the config JSON | samples

and a sample is ``<u4`` sizes of its variable-size columns, then each column's bytes (an ``ndarray`` of
static dtype and dynamic shape: one byte ``ndim << 2 | shape dtype code``, the shape, the values). A shard is
closed before it would pass ``SIZE_LIMIT`` bytes (MDSWriter's default, 64 MiB). The holdout goes to
``DEST/val/`` in the same layout. ``bench/mds_check.py`` reads an export back with ``StreamingDataset``.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from .. import shards as S
from ..repacking import values as V
from .target import OutFile

NAME = "mds"
READS_ROWS = True
SIZE_LIMIT = 1 << 26


def check(src, eos_id: int | None = None) -> list[str]:
    return []


def names(base: str, held: bool) -> list[str]:
    return [base]


def config(columns: dict[str, str]) -> dict:
    """MDSWriter's ``get_config`` for these columns, uncompressed, unhashed."""
    cols = sorted(columns)
    return {"version": 2, "format": "mds", "compression": None, "hashes": [], "size_limit": SIZE_LIMIT,
            "column_names": cols, "column_encodings": [columns[c] for c in cols],
            "column_sizes": [None if c == "doc_lens" else _static_size(columns[c]) for c in cols]}


def _static_size(encoding: str) -> int:
    _, dtype, n = encoding.split(":")
    return np.dtype(dtype).itemsize * int(n)


def _doc_head(n: int) -> bytes:
    """The sample's head (the size of its one variable column, doc_lens) and doc_lens' own: ndim 1, the
    shape in the smallest unsigned type that holds it (MDS's ``NDArray`` encoding)."""
    if n < 1 << 8:
        return struct.pack("<IBB", 2 + 4 * n, 1 << 2 | 0, n)
    if n < 1 << 16:
        return struct.pack("<IBH", 3 + 4 * n, 1 << 2 | 1, n)
    return struct.pack("<IBI", 5 + 4 * n, 1 << 2 | 2, n)


class Writer:
    def __init__(self, target, base: str, src, part: str, eos_id: int | None = None):
        self.folder = target.path(base) + ("/val" if part == "val" else "")
        m = src.manifest
        self.seq_len, self.chat, self.itemsize = m["seq_len"], src.chat, np.dtype(m["dtype"]).itemsize
        columns = {"doc_lens": "ndarray:uint32", "input_ids": f"ndarray:{m['dtype']}:{m['seq_len']}"}
        if src.chat:
            columns[S.LOSS_MASK] = f"ndarray:uint8:{m['seq_len']}"
        self.config = config(columns)
        self.config_bytes = json.dumps(self.config, sort_keys=True).encode()
        self.shards: list[dict] = []
        self.samples: list[bytes] = []
        self.size = 8 + len(self.config_bytes)
        self.rows = 0

    def add(self, table) -> None:
        for batch in table.to_batches():
            ids = V(batch.column("input_ids").flatten()).tobytes()  # (one copy a batch; slices of bytes after)
            lens = batch.column("doc_lens")
            off = V(lens.offsets)
            off = (off - off[0]).tolist()
            values = V(lens.flatten()).astype(np.uint32, copy=False).tobytes()
            mask = V(batch.column(S.LOSS_MASK).flatten()).tobytes() if self.chat else None
            row, rb = self.seq_len * self.itemsize, self.seq_len
            for r in range(batch.num_rows):
                a, b = off[r], off[r + 1]
                parts = [_doc_head(b - a), values[4 * a:4 * b], ids[r * row:(r + 1) * row]]
                if mask is not None:
                    parts.append(mask[r * rb:(r + 1) * rb])
                self._write(b"".join(parts))
        self.rows += table.num_rows

    def _write(self, sample: bytes) -> None:
        if self.samples and SIZE_LIMIT < self.size + len(sample) + 4:
            self._flush()
        self.samples.append(sample)
        self.size += len(sample) + 4

    def _flush(self) -> None:
        n = len(self.samples)
        offsets = np.cumsum([0] + [len(s) for s in self.samples], dtype=np.int64) + 4 + 4 * (n + 1) + len(self.config_bytes)
        name = f"shard.{len(self.shards):05d}.mds"
        out = OutFile(f"{self.folder}/{name}")
        out.append_all([np.uint32(n).tobytes() + offsets.astype(np.uint32).tobytes() + self.config_bytes] + self.samples)
        out.close()
        self.shards.append({**self.config, "samples": n, "raw_data": {"basename": name, "bytes": out.size, "hashes": {}},
                            "zip_data": None})
        self.samples, self.size = [], 8 + len(self.config_bytes)

    def close(self) -> dict:
        if self.samples:
            self._flush()
        out = OutFile(f"{self.folder}/index.json")
        out.append(json.dumps({"version": 2, "shards": self.shards}, sort_keys=True).encode())
        out.close()
        return {"rows": self.rows, "shards": len(self.shards), "columns": self.config["column_names"]}
