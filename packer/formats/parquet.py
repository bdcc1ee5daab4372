"""Parquet (.parquet): one document per row, the text in the ``--text-field`` column.

A file is cut at row-group boundaries; rows are read in batches of the one
column needed.
"""

from __future__ import annotations

from typing import Iterator

from ..errors import PackerError
from ..io import storage_for
from .base import Document, Format, InputFile, Part, Record, Skip, Slice, unreadable
from .chat import _MISSING, ChatFields, Conversation, conversation_of

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
            for rec in (_chat_rows(sl, field) if type(field) is ChatFields else _rows(sl, field)):
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

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        return iter(part.items)  # parsed as read: Arrow decodes the column


def _rows(sl: Slice, field: str) -> Iterator[Record]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = sl.file
    pf = pq.ParquetFile(storage_for(f.path).arrow_file())
    if field not in pf.schema_arrow.names:
        # Every row of these row groups lacks the field: count each one.
        rows = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start, sl.end))
        for i in range(rows):
            yield Skip("missing_field", f"{f.path}: row {i} (no column {field!r})")
        return
    row = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start))
    kind = pf.schema_arrow.field(field).type
    is_text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    for batch in pf.iter_batches(columns=[field], row_groups=range(sl.start, sl.end), batch_size=BATCH_ROWS):
        col = batch.column(0)
        if not is_text:
            for i in range(len(col)):
                yield Skip("not_string", f"{f.path}: row {row + i}")
        else:
            for i, text in enumerate(col.to_pylist()):
                if text is None:
                    yield Skip("not_string", f"{f.path}: row {row + i}")
                elif not text:
                    yield Skip("empty", f"{f.path}: row {row + i}")
                else:
                    yield Document(text)
        row += len(col)


def _chat_rows(sl: Slice, fields: ChatFields) -> Iterator[Record]:
    """Conversations of the row groups of ``sl``: the messages column (a list of structs), or prompt and completion."""
    import pyarrow.parquet as pq

    f = sl.file
    pf = pq.ParquetFile(storage_for(f.path).arrow_file())
    have = set(pf.schema_arrow.names)
    cols = [c for c in dict.fromkeys((fields.messages, fields.prompt, fields.completion)) if c in have]
    row = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start))
    if not cols:
        rows = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start, sl.end))
        for i in range(rows):
            yield Skip("missing_field", f"{f.path}: row {row + i} (no column {fields.messages!r}, "
                                        f"{fields.prompt!r} or {fields.completion!r})")
        return
    for batch in pf.iter_batches(columns=cols, row_groups=range(sl.start, sl.end), batch_size=BATCH_ROWS):
        for i, rec in enumerate(batch.to_pylist()):
            def get(name, rec=rec):
                v = rec.get(name, _MISSING)
                return _MISSING if v is None and name == fields.messages else v
            got = conversation_of(get, fields)
            at = f"{f.path}: row {row + i}"
            if type(got) is str:
                yield Skip(got, at)
            else:
                yield Conversation(got[0], got[1], lambda at=at: at)
        row += batch.num_rows


FORMAT = Parquet()
