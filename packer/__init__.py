"""packer: raw text to packed, memory-mapped token shards for LLM training.

Build side (no torch needed)::

    from packer import build
    build("corpus/", "out/", seq_len=2048, tokenizer="gpt2/tokenizer.json")   # packer build's options, same names

Training side (imports torch on first use)::

    from packer import PackedDataset
    ds = PackedDataset("out/")
"""

__all__ = [
    "BuildConfig", "build", "repack", "export", "pack", "Layout", "PackerError",
    "PackedDataset", "PackedSampler", "PackedLoader", "collate", "block_mask", "dense_mask",
    "collate_padding_free", "whole_rows_first", "packer_attention", "hf_dataset", "BucketDataset", "BucketSampler",
    "source_of",
]
__version__ = "0.1.0"

import sys as _sys  # noqa: E402
import types as _types  # noqa: E402

from .errors import PackerError  # noqa: E402


class _Packer(_types.ModuleType):
    """The package's own class, for one name: ``packer.pack`` is the function, imported on first use like the
    others, though importing the submodule packer/pack.py (of the same name) binds the module there."""

    @property
    def pack(self):
        from .pack import pack

        return pack

    @pack.setter
    def pack(self, value):  # the import system binding the submodule: the function's name stays the function's
        pass


_sys.modules[__name__].__class__ = _Packer

# The other names and the module each lives in, imported on first use: `import packer` imports neither
# numpy, pyarrow nor the build, so the command starts its tokenizer's load (head_start.py) before them, and a
# CPU box builds shards without importing torch (the training side).
_LAZY = {
    "Layout": "pack",
    "BuildConfig": "pipeline",
    "build": "pipeline",
    "repack": "repacking",
    "export": "exports",
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
    "BucketDataset": "train.curriculum",
    "BucketSampler": "train.curriculum",
    "source_of": "inspect",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        try:
            module = importlib.import_module(f".{_LAZY[name]}", __name__)
        except ModuleNotFoundError as e:
            if (e.name or "").partition(".")[0] != "torch":
                raise
            # The README's first command installs the build side alone: say what to install, not torch's traceback.
            raise ImportError(f"packer.{name} is on the training side and needs PyTorch, which is not installed here: "
                              "pip install torch (building shards, packer stats and packer show need none)") from None
        return getattr(module, name)
    raise AttributeError(f"module 'packer' has no attribute {name!r}")


def __dir__():
    """The lazy names too (build, PackedDataset, ...): what completion and dir(packer) list."""
    return sorted(set(globals()) | set(__all__))
