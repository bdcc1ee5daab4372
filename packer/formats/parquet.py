"""Parquet (.parquet): one document per row, the text in the ``--text-field`` column.

A file is cut at row-group boundaries; rows are read in batches of the one
column needed.
"""

from __future__ import annotations

from typing import Iterator

from ..errors import PackerError
from ..io import storage_for
from .base import Document, Format, InputFile, Part, Record, Skip, Slice, unreadable
from .columns import column_records, missing_rows

BATCH_ROWS = 4096


class Parquet(Format):
    name = "parquet"
    suffixes = {".parquet": None}

    def plan(self, f: InputFile, target_bytes: int) -> list[tuple[Slice, int]]:
        import pyarrow.parquet as pq

        try:
            meta = pq.ParquetFile(storage_for(f.path).arrow_file()).metadata
        except Exception as e:  # pyarrow raises many types for a bad file
            raise PackerError(f"cannot read parquet file {f.path}: {e}") from None
        groups = [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
        out, start, acc = [], 0, 0
        for i, g in enumerate(groups):
            if acc and acc + g > target_bytes:
                out.append((Slice(f, start, i), acc))
                start, acc = i, 0
            acc += g
        out.append((Slice(f, start, len(groups)), acc))
        return out

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int) -> Iterator[Part]:
        items: list = []
        n_bytes = 0
        try:
            for rec in _rows(sl, field):
                items.append(rec)
                if type(rec) is Document:
                    n_bytes += len(rec.text)
                    if n_bytes >= part_bytes:
                        yield Part(sl, items, nbytes=n_bytes)
                        items, n_bytes = [], 0
        except OSError as e:
            yield Part(sl, items, tail=unreadable(sl, e), nbytes=n_bytes)
            return
        if items:
            yield Part(sl, items, nbytes=n_bytes)

    def fields(self, sl: Slice, records: int = 50) -> list[str] | None:
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(storage_for(sl.file.path).arrow_file()).schema_arrow.names)

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        return iter(part.items)  # parsed as read: Arrow decodes the column


def _rows(sl: Slice, field: str) -> Iterator[Record]:
    import pyarrow.parquet as pq

    f = sl.file
    pf = pq.ParquetFile(storage_for(f.path).arrow_file())
    if field not in pf.schema_arrow.names:
        # Every row of these row groups lacks the field: count each one.
        rows = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start, sl.end))
        yield from missing_rows(f.path, field, 0, rows)
        return
    row = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start))
    for batch in pf.iter_batches(columns=[field], row_groups=range(sl.start, sl.end), batch_size=BATCH_ROWS):
        col = batch.column(0)
        yield from column_records(col, f.path, row)
        row += len(col)


FORMAT = Parquet()
