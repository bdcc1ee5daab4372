"""Export: a finished build in the files another trainer reads (Megatron, OLMo-core, nanoGPT, MosaicML MDS).

A stage over repacking's reader (``open_source``, ``shard_documents``: every document joined again from its
pieces, checked against the manifest): one module per format (``megatron``, ``olmo``, ``nanogpt``, ``mds``),
``target`` the atomic destination, ``steps`` is ``export()`` top to bottom. docs/export.md has each
trainer's config lines and what each format loses.
"""

from .steps import FORMATS, ExportResult, export

__all__ = ["export", "ExportResult", "FORMATS"]
