"""Inspect: what a build holds, checked and shown (``packer stats``, ``packer show``, ``packer index``'s bar).

``stats.check`` verifies every shard into a ``Report``; ``show`` renders one packed row as the model sees
it; ``provenance`` finds where each of its documents came from in the raw input; ``progress`` holds the bars
the CLI draws over long work.
"""

from .progress import BuildBar, bar
from .show import Decoder, read_row, render
from .provenance import DocumentSource, source_of, unit_sources
from .figures import figures, json_chunks, plot, require_matplotlib, summary_lines, table_lines
from .stats import check, progress_for

__all__ = ["BuildBar", "bar", "Decoder", "read_row", "render", "DocumentSource", "source_of", "unit_sources",
           "check", "summary_lines", "figures",
           "json_chunks", "plot", "progress_for", "require_matplotlib", "table_lines"]
