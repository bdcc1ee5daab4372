"""packer: raw text to packed, memory-mapped token shards for LLM training.

Build side (no torch needed)::

    from packer import build
    build("corpus/", "out/", seq_len=2048, tokenizer="gpt2/tokenizer.json")   # packer build's options, same names

Training side (imports torch on first use)::

    from packer import PackedDataset
    ds = PackedDataset("out/")
"""

from .pipeline import BuildConfig, build
from .errors import PackerError
from .pack import Layout, pack

__all__ = [
    "BuildConfig", "build", "pack", "Layout", "PackerError",
    "PackedDataset", "PackedSampler", "PackedLoader", "collate", "block_mask", "dense_mask",
    "collate_padding_free", "whole_rows_first", "packer_attention", "hf_dataset",
]
__version__ = "0.1.0"

# Training-side names and the module each lives in; imported on first use.
_LAZY = {
    "PackedDataset": "train.dataset",
    "PackedSampler": "train.sampler",
    "PackedLoader": "train.sampler",
    "collate": "train.batching",
    "block_mask": "train.masks",
    "dense_mask": "train.masks",
    "collate_padding_free": "train.batching",
    "whole_rows_first": "train.batching",
    "packer_attention": "train.hf",
    "hf_dataset": "shards.hf_datasets",
}


def __getattr__(name):
    # torch is imported only when the dataset side is asked for, so a CPU box
    # can build shards without importing it.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'packer' has no attribute {name!r}")
