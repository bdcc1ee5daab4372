"""Megatron-LM / megatron-core: an indexed dataset, ``PREFIX.bin`` + ``PREFIX.idx``, one sequence per document.

The layout is megatron-core's ``IndexedDataset`` (megatron/core/datasets/indexed_dataset.py, 0.16-0.19):
``.bin`` holds every document's tokens back to back; ``.idx`` is

    b"MMIDIDX\\x00\\x00" | <Q version 1 | <B dtype code | <Q sequence count N | <Q document count N + 1
    | int32[N] sequence lengths | int64[N] byte pointers into .bin | int64[N + 1] document indices 0..N

``PREFIX.packer.json`` says what the export was made from (the build's manifest head and its documents per
unit), so ``packer repack PREFIX OUT --seq-len N`` gives that build's shards again.
The token dtype is the one Megatron's preprocess_data.py picks (``DType.optimal_dtype(vocab_size)``):
uint16 below 65,500 ids, else int32. The holdout goes to ``PREFIX_val.bin/.idx``. The lengths are
streamed to a side file while the ``.bin`` is written, so memory does not grow with the build; the
``.idx`` is assembled from it at the end in blocks.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ..errors import PackerError
from ..repacking import MEGATRON_DTYPES, MEGATRON_MAGIC
from .target import OutFile

NAME = "megatron"
HEADER = MEGATRON_MAGIC  # (the reader of packer repack knows the same layout: repacking/foreign.py)
CODES = {np.dtype(d): code for code, d in MEGATRON_DTYPES.items() if d in (np.uint16, np.int32)}  # the two written
BLOCK = 1 << 20  # sequences per block while the .idx is assembled
READS_ROWS = False


def token_dtype(vocab_size: int) -> np.dtype:
    """megatron-core's ``DType.optimal_dtype``: uint16 if the cardinality is below 65,500, else int32."""
    return np.dtype(np.uint16 if vocab_size < 65500 else np.int32)


def check(src, eos_id: int | None = None) -> list[str]:
    if src.chat:
        raise PackerError(f"{src.root} is a chat build: Megatron's indexed dataset has no place for its loss_mask "
                          "(every token would be trained on); export it as --format olmo or mds")
    return []


def names(base: str, held: bool) -> list[str]:
    """DEST's files in commit order: the .idx of the training set, which a reader opens first, last."""
    return [base + ".bin"] + ([base + "_val.bin", base + "_val.idx"] if held else []) + [base + ".packer.json",
                                                                                          base + ".idx"]


class Writer:
    def __init__(self, target, base: str, src, part: str, eos_id: int | None = None):
        stem = base + ("_val" if part == "val" else "")
        self.idx_path = target.path(stem + ".idx")
        self.dtype = token_dtype(src.manifest["vocab_size"])
        self.bin = OutFile(target.path(stem + ".bin"))
        self.lengths = OutFile(target.path(stem + ".lengths"))
        self.count = 0

    def add(self, pieces) -> None:
        self.bin.append_tokens(pieces, self.dtype)
        self.lengths.append(pieces.lengths.astype(np.int32))
        self.count += len(pieces.lengths)

    def close(self) -> dict:
        self.bin.close()
        self.lengths.close()
        n = self.count
        size = np.int64(self.dtype.itemsize)
        with open(self.idx_path, "wb") as out, open(self.lengths.path, "rb") as lens:
            out.write(HEADER + struct.pack("<Q", 1) + struct.pack("<B", CODES[self.dtype]))
            out.write(struct.pack("<Q", n) + struct.pack("<Q", n + 1))
            for block in _blocks(lens):
                out.write(memoryview(block))
            lens.seek(0)
            at = np.int64(0)
            for block in _blocks(lens):
                ends = np.cumsum(block, dtype=np.int64) * size + at
                out.write(memoryview(ends - block.astype(np.int64) * size))
                at = ends[-1]
            for start in range(0, n + 1, BLOCK):
                out.write(memoryview(np.arange(start, min(start + BLOCK, n + 1), dtype=np.int64)))
        os.unlink(self.lengths.path)
        return {"documents": n, "tokens": self.bin.size // self.dtype.itemsize, "dtype": self.dtype.name}


def _blocks(f):
    while True:
        data = f.read(BLOCK * 4)
        if not data:
            return
        yield np.frombuffer(data, dtype=np.int32)

