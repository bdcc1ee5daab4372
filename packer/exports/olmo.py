"""OLMo-core (and dolma-style) token arrays: ``DEST/part-00000.npy`` ..., raw 1-D arrays with no header.

OLMo-core's ``NumpyFSLDataset`` reads each path as ``np.memmap(path, dtype)``-style raw bytes
(``olmo_core.data.utils.load_array_slice``: byte ranges, ``np.frombuffer``), cuts it into windows of
``sequence_length`` tokens and drops each file's remainder; documents are told apart by the EOS id, so
every document must end with it: where one does not (a chat build's conversation whose template ends it
otherwise, a ``--no-eos`` build), ``eos_id`` is added after it, not trained on (label mask 0). A chat build
records no EOS id: ``--eos-id`` names it. The dtype is ``NumpyDatasetConfig.get_dtype``'s: the smallest of
uint8/16/32/64 that holds ``vocab_size - 1``. A chat build also writes its loss mask, one bool byte per
token (1 = trained on), at ``DEST/label_mask/part-*.npy``: OLMo-core's ``label_mask_paths``, one per
path. The holdout goes to ``DEST/val/`` in the same layout. A file is closed and the next begun past
``PART_BYTES``, at a document's end.
"""

from __future__ import annotations

import numpy as np

from ..errors import PackerError
from ..repacking import joined, olmo_dtype
from .target import OutFile

NAME = "olmo"
PART_BYTES = 1 << 30
READS_ROWS = False


token_dtype = olmo_dtype  # (one rule for the writer here and the reader of packer repack: repacking/foreign.py)


def check(src, eos_id: int | None = None) -> list[str]:
    m = src.manifest
    eos = m.get("eos_id") if eos_id is None else eos_id
    if eos is None:
        what = "a chat build records no EOS id" if src.chat else "it was built with --no-eos"
        raise PackerError(f"{src.root}: {what}, and OLMo-core finds documents by EOS: pass --eos-id N, the id that "
                          "ends each document (a chat template's end of turn, e.g. <|im_end|>), to add where missing")
    if not 0 <= eos < m["vocab_size"]:
        raise PackerError(f"--eos-id {eos} is not an id of the build's vocabulary (0 to {m['vocab_size'] - 1})")
    return []


def names(base: str, held: bool) -> list[str]:
    return [base]


class Writer:
    def __init__(self, target, base: str, src, part: str, eos_id: int | None = None):
        self.folder = target.path(base) + ("/val" if part == "val" else "")
        self.dtype = token_dtype(src.manifest["vocab_size"])
        self.eos = src.manifest["eos_id"] if eos_id is None else eos_id
        self.chat = src.chat
        m = src.manifest  # the build ended every document with this EOS itself: nothing to look at or add
        self.runs = not src.chat and m["settings"].get("eos", True) and m.get("eos_id") == self.eos
        self.parts: list[str] = []
        self.out = self.mask = None
        self.tokens = self.documents = self.eos_added = 0

    def _next(self) -> None:
        self._close_part()
        name = f"part-{len(self.parts):05d}.npy"
        self.parts.append(name)
        self.out = OutFile(f"{self.folder}/{name}")
        self.mask = OutFile(f"{self.folder}/label_mask/{name}") if self.chat else None

    def add(self, pieces) -> None:
        if not len(pieces.lengths):
            return
        if self.out is None or self.out.size >= PART_BYTES:
            self._next()
        if self.runs:  # every document ends with EOS: written as it lies
            self.out.append_tokens(pieces, self.dtype)
            self.tokens += int(pieces.lengths.sum())
            self.documents += len(pieces.lengths)
            return
        docs = joined(pieces)
        tokens, mask = docs.tokens, docs.mask
        ends = np.cumsum(docs.lengths) - 1
        need = ends[tokens[ends] != self.eos] + 1
        if len(need):  # (a chat build, or --no-eos with --eos-id): EOS added, not trained on
            tokens = np.insert(tokens, need, self.eos)
            mask = None if mask is None else np.insert(mask, need, 0)
            self.eos_added += len(need)
        self.out.append(tokens.astype(self.dtype, copy=False))
        if self.mask is not None:
            self.mask.append((mask != 0).view(np.uint8))
        self.tokens += len(tokens)
        self.documents += len(docs.lengths)

    def _close_part(self) -> None:
        for f in (self.out, self.mask):
            if f is not None:
                f.close()

    def close(self) -> dict:
        self._close_part()
        info = {"documents": self.documents, "tokens": self.tokens, "dtype": self.dtype.name, "paths": self.parts}
        if self.chat:
            info["label_mask_paths"] = [f"label_mask/{p}" for p in self.parts]
        info["eos_id"], info["eos_added"] = self.eos, self.eos_added
        return info
