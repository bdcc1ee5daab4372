"""Arrow IPC (.arrow): the files HF datasets' ``save_to_disk`` writes (data-00000-of-00001.arrow), one document per row.

Both IPC layouts are read: the *stream* format (what ``datasets`` writes; read
as it streams, with read-ahead) and the *file* format (``ARROW1`` magic).
The text is the ``--text-field`` column. A file is one slice: the stream
format has no index to cut it by. The folder's dataset_info.json and
state.json are metadata, named as ignored by discovery (formats/layouts.py).
"""

from __future__ import annotations

from typing import Iterator

from ..io import open_stream, storage_for
from .base import DEFAULT_MAX_RECORD, Format, Part, Record, Slice, broken_read, grouped
from .columns import column_records, missing_rows

FILE_MAGIC = b"ARROW1"


class Arrow(Format):
    name = "arrow"
    suffixes = {".arrow": None}

    def parts(self, sl: Slice, field: str, on_bytes, part_bytes: int,
              max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Part]:
        # a text over max_record is a too_long Skip, as in parquet; a record batch itself is read whole
        # pyarrow reports a cut stream ("Expected to be able to read N bytes") as an OSError with
        # no errno, and a file that is not Arrow IPC as ArrowInvalid; a real read error has an errno.
        import pyarrow as pa

        return grouped(sl, _rows(sl, field, on_bytes, max_record), part_bytes, (OSError, pa.ArrowInvalid),
                       lambda e: broken_read(sl, e))

    def fields(self, sl: Slice, records: int = 50) -> list[str] | None:
        import pyarrow as pa

        store = storage_for(sl.file.path)
        with store.stream() as fh:
            magic = fh.read(len(FILE_MAGIC))
        if magic == FILE_MAGIC:
            return list(pa.ipc.open_file(store.arrow_file()).schema.names)
        with open_stream(sl.file.path, None) as s:
            return list(pa.ipc.open_stream(s).schema.names)

    location_kind = "row"

    def locations(self, part: Part) -> list[int]:
        return list(range(len(part.items)))  # a record per row

    def parse(self, part: Part, field: tuple[str, ...]) -> Iterator[Record]:
        return iter(part.items)  # parsed as read: Arrow decodes the column


def _rows(sl: Slice, field: str, on_bytes, max_record: int = DEFAULT_MAX_RECORD) -> Iterator[Record]:
    import pyarrow as pa

    path = sl.file.path
    store = storage_for(path)
    with store.stream() as fh:
        magic = fh.read(len(FILE_MAGIC))
    if magic == FILE_MAGIC:
        reader = pa.ipc.open_file(store.arrow_file())
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        schema, stream = reader.schema, None
    else:
        stream = open_stream(path, None, on_bytes=on_bytes)
        reader = pa.ipc.open_stream(stream)
        batches, schema = iter(reader), reader.schema
    try:
        row = 0
        has = field in schema.names
        for batch in batches:
            if has:
                yield from column_records(batch.column(field), path, row, max_record)
            else:
                yield from missing_rows(path, field, row, batch.num_rows)
            row += batch.num_rows
    finally:
        if stream is not None:
            stream.close()


FORMAT = Arrow()
