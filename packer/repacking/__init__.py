"""Repack: finished builds in, a build at another sequence length (or packing) out, with no tokenizer.

A stage over shards/: ``source`` opens a finished build and joins each shard's documents again,
``unit`` packs one source shard at the new length with the build's own packing (``pipeline.pack_shard``),
``run`` runs units on workers or Ray, ``steps`` is ``repack()`` top to bottom.
"""

from .steps import RepackResult, repack
from .source import Documents, Source, open_source, shard_documents

__all__ = ["repack", "RepackResult", "Source", "open_source", "Documents", "shard_documents"]
