"""Records from an Arrow column of texts: shared by the columnar formats (parquet, arrow).

Arrow does not check that a string column holds valid UTF-8 when it reads a
file; ``column_records`` checks each batch once (in C) and only a batch that
fails is decoded row by row, so a bad row is one ``invalid_utf8`` skip, not a
crash and not a repair.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from .base import Document, Record, Skip


def is_text_type(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def as_text(col: pa.Array) -> pa.Array:
    """``col`` with a dictionary or run-end encoding of strings decoded (Arrow IPC keeps both as
    written: HF datasets' ClassLabel-like columns, polars' categoricals); any other column as it is."""
    kind = col.type
    if pa.types.is_dictionary(kind) and is_text_type(kind.value_type):
        return col.dictionary_decode()
    if pa.types.is_run_end_encoded(kind) and is_text_type(kind.value_type):
        import pyarrow.compute as pc

        return pc.run_end_decode(col)
    return col


def column_records(col: pa.Array, path: str, row0: int, max_record: int | None = None) -> Iterator[Record]:
    """A Document or Skip per row of ``col`` (row numbers from ``row0``, 0-based in the file); a text
    over ``max_record`` bytes (``--max-record-mb``) is a ``too_long`` Skip. A dictionary or run-end
    encoded column of strings is read as its strings."""
    col = as_text(col)
    if not is_text_type(col.type):
        for i in range(len(col)):
            yield Skip("not_string", f"{path}: row {row0 + i}")
        return
    nbytes = _utf8_bytes(col) if max_record is not None else None
    try:
        col.validate(full=True)
        values = col.to_pylist()
    except (pa.ArrowInvalid, UnicodeDecodeError):
        values = [_decode(v) for v in col.cast(pa.large_binary()).to_pylist()]
    for i, text in enumerate(values):
        if text is None:
            yield Skip("not_string", f"{path}: row {row0 + i}")
        elif text is _BAD:
            yield Skip("invalid_utf8", f"{path}: row {row0 + i}")
        elif not text:
            yield Skip("empty", f"{path}: row {row0 + i}")
        elif nbytes is not None and nbytes[i] > max_record:
            yield Skip("too_long", f"{path}: row {row0 + i} (over --max-record-mb {max_record / (1 << 20):g})")
        else:
            yield Document(text)


_BAD = object()


def _utf8_bytes(col: pa.Array):
    """Each cell's length in UTF-8 bytes, as Arrow holds it (``--max-record-mb`` is in bytes, not characters)."""
    import pyarrow.compute as pc

    if pa.types.is_string_view(col.type):
        col = col.cast(pa.large_string())
    return pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False)


def _decode(v: bytes | None):
    if v is None:
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return _BAD


def missing_rows(path: str, field: str, row0: int, rows: int) -> Iterator[Skip]:
    """A ``missing_field`` Skip for each of ``rows`` rows of a table without the column ``field``."""
    for i in range(rows):
        yield Skip("missing_field", f"{path}: row {row0 + i} (no column {field!r})")
