"""Parquet (.parquet): one document per row, the text in the ``--text-field`` column.

A file is cut at row-group boundaries; rows are read in batches of the one
column needed.
"""

from __future__ import annotations

from typing import Iterator

from ..errors import PackerError
from ..io import storage_for
from .base import DEFAULT_MAX_RECORD, Format, InputFile, Part, Record, Skip, Slice, broken_read, grouped
from .chat import _MISSING, ChatFields, Conversation, conversation_of
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

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int,
              max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Part]:
        # A file replaced (by a rename) since it was planned: pyarrow raises ArrowInvalid or an OSError
        # without errno for what is no longer parquet, _open a _Replaced for fewer row groups than planned.
        import pyarrow as pa

        rows = _chat_rows(sl, field) if type(field) is ChatFields else _rows(sl, field, max_record)
        return grouped(sl, rows, part_bytes, (OSError, pa.ArrowInvalid, _Replaced), lambda e: broken_read(sl, e))

    def fields(self, sl: Slice, records: int = 50) -> list[str] | None:
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(storage_for(sl.file.path).arrow_file()).schema_arrow.names)

    location_kind = "row"

    def locations(self, part: Part) -> list[int]:
        return list(range(len(part.items)))  # a record per row

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        return iter(part.items)  # parsed as read: Arrow decodes the column

    def first_row(self, sl: Slice) -> int:
        meta = _open(sl).metadata
        return sum(meta.row_group(i).num_rows for i in range(sl.start))


class _Replaced(Exception):
    """The file holds fewer row groups than when it was planned: it was replaced."""


def _open(sl: Slice):
    """The ParquetFile of ``sl``, which must still hold the row groups planned."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(storage_for(sl.file.path).arrow_file())
    have = pf.metadata.num_row_groups
    if sl.end > have:
        planned = f"row group {sl.start}" if sl.end - sl.start == 1 else f"row groups {sl.start}-{sl.end - 1}"
        raise _Replaced(f"the file changed while it was read (it holds {have} row group{'s' * (have != 1)} now, "
                        f"{planned} planned)")
    return pf


def _rows(sl: Slice, field: str, max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Record]:
    """The records of ``sl``'s row groups: the ``field`` column, or a struct
    column's child for a dotted ``field`` ("meta.body"), of any string type
    (string, large_string, string_view, dictionary of strings)."""
    import pyarrow.compute as pc

    f = sl.file
    pf = _open(sl)
    column, path = _locate(pf.schema_arrow, field)
    if column is None:
        # Every row of these row groups lacks the field: count each one.
        rows = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start, sl.end))
        yield from missing_rows(f.path, field, 0, rows)
        return
    row = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start))
    # use_threads=False: decoded on this thread, not in pyarrow's pool; a worker is one core (the same speed measured
    # on one text column: 0.08 s for 40 MB either way), and a pool thread came up in each worker that read one
    for batch in pf.iter_batches(columns=[column], row_groups=range(sl.start, sl.end), batch_size=BATCH_ROWS,
                                 use_threads=False):
        col = batch.column(0)
        for name in path:  # down a struct: a null parent gives a null child
            col = pc.struct_field(col, name)
        yield from column_records(col, f.path, row, max_record)
        row += len(col)


def _locate(schema, field: str) -> tuple[str | None, list[str]]:
    """(top-level column to read, struct children down to the text) for ``field``; (None, []) if absent."""
    import pyarrow as pa

    if field in schema.names:
        return field, []
    parts = field.split(".")
    if parts[0] not in schema.names:
        return None, []
    t = schema.field(parts[0]).type
    for name in parts[1:]:
        if not pa.types.is_struct(t) or t.get_field_index(name) < 0:
            return None, []
        t = t.field(t.get_field_index(name)).type
    return parts[0], parts[1:]


def _chat_rows(sl: Slice, fields: ChatFields) -> Iterator[Record]:
    """Conversations of the row groups of ``sl``: the messages column (a list of structs), or prompt and completion."""
    f = sl.file
    pf = _open(sl)
    have = set(pf.schema_arrow.names)
    cols = [c for c in dict.fromkeys((fields.messages, fields.prompt, fields.completion)) if c in have]
    row = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start))
    if not cols:
        rows = sum(pf.metadata.row_group(i).num_rows for i in range(sl.start, sl.end))
        for i in range(rows):
            yield Skip("missing_field", f"{f.path}: row {row + i} (no column {fields.messages!r}, "
                                        f"{fields.prompt!r} or {fields.completion!r})")
        return
    for batch in pf.iter_batches(columns=cols, row_groups=range(sl.start, sl.end), batch_size=BATCH_ROWS,
                                 use_threads=False):  # as in _rows
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
