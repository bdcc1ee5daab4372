"""nanoGPT: ``DEST/train.bin`` and ``DEST/val.bin``, every token back to back, as its prepare.py writes them.

nanoGPT's train.py reads ``np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')`` and
takes random windows of ``block_size + 1`` tokens: there are no documents, only the EOS a packer build
ends each document with. Token ids of 65,536 and over do not fit uint16: such a build is written as
uint32 and said so (``packer-export.json``, the command's note): change the two ``np.uint16`` of
train.py's ``get_batch`` to ``np.uint32``. The holdout is ``val.bin``; a build without one gets no
``val.bin`` (train.py's ``estimate_loss`` reads it: build with ``--holdout``).
"""

from __future__ import annotations

import numpy as np

from ..errors import PackerError
from .target import OutFile

NAME = "nanogpt"
READS_ROWS = False


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def check(src, eos_id: int | None = None) -> list[str]:
    if src.chat:
        raise PackerError(f"{src.root} is a chat build: nanoGPT's .bin files have no place for its loss_mask "
                          "(every token would be trained on); export it as --format olmo or mds")
    notes = []
    if token_dtype(src.manifest["vocab_size"]) != np.uint16:
        notes.append(f"nanogpt: vocab_size {src.manifest['vocab_size']:,} does not fit uint16: train.bin is uint32; "
                     "read it with np.memmap(..., dtype=np.uint32) in get_batch")
    if src.holdout is None:
        notes.append("nanogpt: the build has no holdout, so no val.bin was written (train.py's estimate_loss "
                     "reads one): build with --holdout")
    if src.manifest.get("eos_id") is None or not src.manifest["settings"].get("eos", True):
        notes.append("nanogpt: the build has no EOS after each document: documents run into each other in train.bin")
    return notes


def names(base: str, held: bool) -> list[str]:
    return [base]


class Writer:
    def __init__(self, target, base: str, src, part: str, eos_id: int | None = None):
        self.dtype = token_dtype(src.manifest["vocab_size"])
        self.out = OutFile(target.path(f"{base}/{part}.bin"))
        self.documents = 0

    def add(self, pieces) -> None:
        self.out.append_tokens(pieces, self.dtype)
        self.documents += len(pieces.lengths)

    def close(self) -> dict:
        self.out.close()
        return {"documents": self.documents, "tokens": self.out.size // self.dtype.itemsize, "dtype": self.dtype.name}
