"""Repack: finished builds in, a build at another sequence length (or packing) out, with no tokenizer.

A stage over shards/: ``source`` opens a finished build and joins each shard's documents again,
``unit`` packs one source shard at the new length with the build's own packing (``pipeline.pack_shard``),
``run`` runs units on workers or Ray, ``steps`` is ``repack()`` top to bottom. With ``--buckets``,
``buckets`` (the decomposition), ``bucket_unit`` and ``bucket_steps`` write power-of-two length buckets.
"""

from .bucket_steps import repack
from .steps import RepackResult
from .buckets import decompose, parse_buckets
from .foreign import MEGATRON_DTYPES, MEGATRON_MAGIC, olmo_dtype
from .source import Documents, Pieces, Source, inside, joined, open_source, shard_documents, shard_pieces, shard_rows, values

__all__ = ["repack", "decompose", "parse_buckets", "RepackResult", "Source", "open_source", "Documents", "shard_documents",
           "shard_rows", "Pieces", "shard_pieces", "joined", "values", "inside",
           "MEGATRON_MAGIC", "MEGATRON_DTYPES", "olmo_dtype"]
