"""datasets' MemoryMappedTable over an Arrow IPC *file* (see hf_datasets.py); imports datasets."""

from __future__ import annotations

import pyarrow as pa
from datasets.table import MemoryMappedTable


def _read(path: str) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(path, "r")).read_all()


class ArrowFileTable(MemoryMappedTable):
    """A MemoryMappedTable that reads the IPC file format (datasets' own reads the stream format).

    Pickled, it is its path and replays, as its base; the table operations that
    return a new MemoryMappedTable are wrapped to return this class instead, so
    a reloaded slice still reads the file format."""

    @classmethod
    def from_file(cls, filename: str, replays=None):
        return cls(cls._apply_replays(_read(filename), replays), filename, replays)

    def __setstate__(self, state):
        table = self._apply_replays(_read(state["path"]), state["replays"])
        MemoryMappedTable.__init__(self, table, path=state["path"], replays=state["replays"])


def _keep_class(name: str):
    base = getattr(MemoryMappedTable, name)

    def method(self, *args, **kwargs):
        out = base(self, *args, **kwargs)
        if type(out) is MemoryMappedTable:
            out.__class__ = ArrowFileTable  # same layout
        return out

    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


for _name in ("slice", "filter", "flatten", "combine_chunks", "cast", "replace_schema_metadata", "add_column",
              "append_column", "remove_column", "set_column", "rename_columns", "drop", "select"):
    if hasattr(MemoryMappedTable, _name):
        setattr(ArrowFileTable, _name, _keep_class(_name))
