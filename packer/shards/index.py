"""The shard index: a build's shard list as one Arrow table beside its manifest (docs/format.md).

``index.arrow`` (Arrow IPC file, one record batch, uncompressed) holds one row
per entry of the manifest's ``shards`` list, in order, and in its schema
metadata the manifest without that list plus the size and xxh3_128 of
manifest.json's bytes. It is written just before the manifest
(``write_manifest``). A reader that finds it, and finds manifest.json with that
size and hash, reads the shard list from the index, memory-mapped: columns,
not a million JSON objects. Any mismatch (a manifest edited by hand, an index
left by another build, a damaged index) and the manifest is read instead: the
manifest stays the contract, the index is a cache of it. An index with the
manifest's stamp is validated before use (``index_problem``: buffers and UTF-8 in
full, columns and types, nulls, ranges, counts against the manifest's totals); a
damaged one is ignored with one warning naming it (a stale one, silently).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pyarrow as pa
import xxhash

from ..errors import ShardError
from ..io import Storage, json_bytes
from .manifest import COUNTS, check_manifest, parse_manifest, read_manifest_bytes
from .layout import LAYOUT_KEY, LAYOUT_VERSION, NONE, from_record, layout_columns, open_layouts, shard_layout
from .schema import CHECKSUM, LOSS_MASK, MANIFEST, UNIT_DIR

INDEX = "index.arrow"
INDEX_VERSION = 1
SLOW_LIST = 10_000  # shards from which opening without the index is slow enough to warn (about 0.05 s)
_HEAD, _SIZE, _HASH, _VERSION = b"packer_manifest", b"packer_manifest_bytes", b"packer_manifest_xxh3_128", b"packer_index_version"


def write_manifest(store: Storage, m: dict, layouts: list | None = None) -> None:
    """Publish the build's index, then its manifest (last: its presence means the build is complete).
    The index records each local shard's row layout, read from the shard (``layouts``: given instead)."""
    data = json_bytes(m)
    if layouts is None:
        layouts = shard_layouts(store, m)
    store.put(INDEX, index_bytes(m, data, layouts))
    store.put(MANIFEST, data)


def reindex(store: Storage, progress=None) -> int:
    """Write index.arrow for the build at ``store`` from manifest.json as it is (not rewritten: the index
    matches its bytes), each shard's row layout read from its footer as ``write_manifest`` does; the
    shard count. For a build made before the index, or whose manifest was edited since. ``progress``:
    called with 1 per shard read."""
    data = read_manifest_bytes(store)
    m = parse_manifest(data, store.path(MANIFEST))
    store.put(INDEX, index_bytes(m, data, shard_layouts(store, m, progress)))
    return len(m["shards"])


def shard_layouts(store: Storage, m: dict, progress=None) -> list:
    """Every shard's row layout (packer/shards/layout.py): each local shard's footer and headers read
    once; on an object store, the layout its worker recorded in the unit's record (one small GET a unit,
    not the shard again). The same values either way, so both stores hold the same index bytes."""
    L, dtype, mask = int(m["seq_len"]), str(m["dtype"]), LOSS_MASK in m.get("columns", [])
    tick = progress or (lambda n: None)
    if not store.reads_in_place:
        return [(_recorded_layout(store, e), tick(1))[0] for e in m["shards"]]
    out = []
    for e in m["shards"]:
        tick(1)
        try:
            with store.arrow_map(e["path"]) as f:  # only the footer and batch headers are touched
                data = f.read_buffer()
                out.append(shard_layout(data, int(e.get("rows", 0)), L, dtype, mask) if len(data) == e.get("bytes") else NONE)
                del data
        except (OSError, ValueError):  # missing or unreadable: no layout (readers report it)
            out.append(NONE)
    return out


def _int64(values, n: int) -> pa.Array:
    """int64 column from Python ints (None: null), built from buffers: ``pa.array`` imports pandas
    where it is installed (0.3-0.5 s of every build's end, in the main process), from_buffers does not."""
    vals = list(values)
    nulls = np.fromiter((v is None for v in vals), bool, n)
    a = np.fromiter((0 if v is None else v for v in vals), np.int64, n)
    valid = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    return pa.Array.from_buffers(pa.int64(), n, [valid, pa.py_buffer(a)], null_count=int(nulls.sum()))


def _strings(values, n: int) -> pa.Array:
    """string column from Python strs, built from buffers (see ``_int64``)."""
    raw = [v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.fromiter(map(len, raw), np.int64, n), out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))])


def _recorded_layout(store: Storage, e: dict) -> tuple:
    try:
        rec = json.loads(store.read(f"{UNIT_DIR}/{int(e['unit']):06d}.json"))
    except (OSError, ValueError, TypeError, KeyError):  # no record (a build made otherwise): no layout
        return NONE
    return from_record(rec.get("layout")) if isinstance(rec, dict) else NONE


def index_table(m: dict, data: bytes | None = None, layouts: list | None = None) -> pa.Table:
    """The index of manifest ``m`` (whose bytes are ``data``, stamped into the metadata when given;
    ``layouts``: the shards' row layouts, recorded when given)."""
    shards = m["shards"]
    n = len(shards)
    rows = np.fromiter((e.get("rows", 0) for e in shards), np.int64, n)
    start = np.zeros(n, np.int64)
    np.cumsum(rows[:-1], out=start[1:])
    cols = {
        "path": _strings((e["path"] for e in shards), n),
        "unit": _int64((e.get("unit") for e in shards), n),
        "row_start": _int64(start.tolist(), n),
        "bytes": _int64((e.get("bytes", 0) for e in shards), n),
        CHECKSUM: _strings((e.get(CHECKSUM, "") for e in shards), n),
    }
    for k in COUNTS + ("trained_tokens",):
        if k == "rows" or any(k in e for e in shards):
            cols[k] = _int64((e.get(k, 0) for e in shards), n)
    meta = {_VERSION: str(INDEX_VERSION).encode(),
            _HEAD: json.dumps({k: v for k, v in m.items() if k != "shards"}).encode()}
    if layouts is not None:
        cols |= layout_columns(layouts, LOSS_MASK in m.get("columns", []))
        meta[LAYOUT_KEY] = str(LAYOUT_VERSION).encode()
    if data is not None:
        meta |= {_SIZE: str(len(data)).encode(), _HASH: xxhash.xxh3_128_hexdigest(data).encode()}
    return pa.Table.from_arrays(list(cols.values()), names=list(cols)).replace_schema_metadata(meta)


def index_bytes(m: dict, data: bytes, layouts: list | None = None) -> pa.Buffer:
    t = index_table(m, data, layouts)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t, max_chunksize=max(1, t.num_rows))  # one batch: every column one zero-copy array
    return sink.getvalue()


class ShardIndex:
    """One build's manifest head (``head``: the manifest without ``shards``) and its shards as columns.

    ``starts`` (n,) int64: each shard's first row; ``rows``, ``nbytes``: (n,) int64;
    ``path(k)``/``checksum(k)``: one shard's. Backed by index.arrow memory-mapped
    (nothing per shard in this process's private memory), or by a table made
    from the manifest's list (``from_index`` False: a build without an index).
    """

    def __init__(self, table: pa.Table, head: dict, source: str, store: Storage | None = None):
        self.head, self.source, self.store = head, source, store
        self.from_index = store is not None  # index.arrow mapped (else: a table made from the manifest)
        self._load(table)
        self.layouts = open_layouts(table, table.schema.metadata or {}) if self.from_index else None

    def __getstate__(self):
        """Pickled (a spawned worker), an index-backed list is its store: the child maps the file again."""
        if not self.from_index:
            return {"head": self.head, "source": self.source, "store": None, "table": self.table}
        return {"head": self.head, "source": self.source, "store": self.store}

    def __setstate__(self, state):
        self.head, self.source, self.store = state["head"], state["source"], state["store"]
        self.from_index = self.store is not None
        if self.from_index:  # mapped again, and checked again: the file may have changed since
            try:
                table = _read_table(self.store)[0]
                why = index_problem(table, self.head)
            except _READ_ERRORS as err:
                why = f"unreadable ({_first_line(err)})"
            if why:
                raise ShardError(f"{self.source}: damaged shard index ({why}), changed since the dataset opened it")
        else:
            table = state["table"]
        self._load(table)
        self.layouts = open_layouts(table, table.schema.metadata or {}) if self.from_index else None

    def _load(self, table: pa.Table) -> None:
        """The columns as arrays (index.arrow's: checked first by ``index_problem``)."""
        self.table = table
        self.n = table.num_rows
        col = {name: _one_array(table.column(name)) for name in ("path", "row_start", "rows", "bytes", CHECKSUM)}
        self._paths, self._sums = col["path"], col[CHECKSUM]
        self.starts, self.rows, self.nbytes = (col[k].to_numpy(zero_copy_only=True) for k in ("row_start", "rows", "bytes"))
        self.total_rows = int(self.starts[-1] + self.rows[-1]) if self.n else 0

    def outside(self) -> str | None:
        """The first shard path that leaves the build folder (absolute, ``..``, a backslash or NUL), or None:
        the rule of ``Storage.inside``, over the whole column at once."""
        import pyarrow.compute as pc

        p = self._paths
        bad = pc.or_(pc.or_(pc.equal(pc.utf8_length(p), 0), pc.starts_with(p, "/")),
                     pc.or_(pc.match_substring_regex(p, r"[\\\x00]"), pc.match_substring_regex(p, r"(^|/)\.\.(/|$)")))
        k = pc.index(bad, True).as_py()
        return None if k < 0 else self.path(k)

    def path(self, k: int) -> str:
        return self._paths[k].as_py()

    def unit(self, k: int) -> int | None:
        return self.table.column("unit")[k].as_py()

    def checksum(self, k: int) -> str:
        return self._sums[k].as_py()

    def column(self, name: str) -> np.ndarray | None:
        """A count column ((n,) int64) where the index has it, else None."""
        if name not in self.table.column_names:
            return None
        return _one_array(self.table.column(name)).to_numpy(zero_copy_only=False)


def _one_array(col: pa.ChunkedArray) -> pa.Array:
    """The column as one array: its only chunk as it lies in the map (``combine_chunks`` copies)."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def open_index(store: Storage) -> ShardIndex:
    """The shard list of the build at ``store``: from index.arrow when it matches manifest.json
    byte for byte (size and xxh3_128), else from the manifest. ``ShardError`` for a bad manifest."""
    index = _matching_index(store)
    if index is not None:
        return index
    m = parse_manifest(read_manifest_bytes(store), store.path(MANIFEST))
    head = {k: v for k, v in m.items() if k != "shards"}
    if len(m["shards"]) >= SLOW_LIST:
        warnings.warn(f"{store.path(INDEX)} is missing or does not match {MANIFEST}: the list of {len(m['shards']):,} "
                      f"shards was parsed from the manifest, in this process (about 8.5 s and 1.3 GB at 10^6 shards); "
                      f"`packer index {store.root}` writes the index", stacklevel=3)
    return ShardIndex(index_table(m), head, store.path(MANIFEST))


_READ_ERRORS = (OSError, ValueError, pa.ArrowException, UnicodeDecodeError, RecursionError, KeyError, TypeError,
                IndexError, OverflowError)
_TYPES = {"path": pa.string(), "unit": pa.int64(), "row_start": pa.int64(), "bytes": pa.int64(), CHECKSUM: pa.string()}
_NO_NULLS = ("path", "row_start", "rows", "bytes", CHECKSUM)


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [type(err).__name__])[0]


def _read_table(store: Storage) -> tuple[pa.Table, dict]:
    """index.arrow, memory-mapped where local (a regular file: never blocks on a FIFO), validated in full
    (offsets, lengths, UTF-8: nothing below reads past a buffer), and its schema metadata."""
    data = store.map_or_read(INDEX)
    table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    table.validate(full=True)
    return table, table.schema.metadata or {}


def index_problem(table: pa.Table, head: dict) -> str | None:
    """What is wrong with index.arrow's ``table`` as the shard list of the manifest whose head is ``head``
    (the manifest without ``shards``), or None: the columns and their types, no nulls where a shard
    needs a value, counts not negative, ``row_start`` the running sum of ``rows``, and every count
    column summing to the manifest's total (an index cut by a row, keeping its metadata, is caught here)."""
    types = {**_TYPES, **{k: pa.int64() for k in COUNTS + ("trained_tokens",) if k in table.column_names}}
    for name, want in types.items():
        i = table.schema.get_field_index(name)
        if i < 0 and name != "unit":
            return f"column {name} is missing"
        if i >= 0 and not table.schema.field(i).type.equals(want):
            return f"column {name} is {table.schema.field(i).type}, not {want}"
    if "rows" not in table.column_names:
        return "column rows is missing"
    counts = [k for k in COUNTS + ("trained_tokens",) if k in table.column_names]
    for name in _NO_NULLS + tuple(counts):
        if table.column(name).null_count:
            return f"column {name} holds nulls"
    n = table.num_rows
    # (zero_copy_only: no nulls, so a view; zero_copy_only=False goes through pyarrow's pandas path, importing pandas)
    starts, rows, nbytes = (_one_array(table.column(k)).to_numpy(zero_copy_only=True) for k in ("row_start", "rows", "bytes"))
    if n and (rows.min() < 0 or nbytes.min() < 0 or starts[0] != 0 or not np.array_equal(np.diff(starts), rows[:-1])):
        return "rows, bytes or row_start out of range"
    if "unit" in table.column_names and n:
        units = _one_array(table.column("unit")).fill_null(0).to_numpy(zero_copy_only=True)
        if units.min() < 0 or units.max() > 10**12:
            return "a unit out of range"
    totals = head.get("totals") if isinstance(head.get("totals"), dict) else {}
    for k in counts:
        if isinstance(totals.get(k), int):
            got = int(_one_array(table.column(k)).to_numpy(zero_copy_only=True).sum(dtype=np.int64))
            if got != totals[k]:
                return f"its {n:,} shards hold {got:,} {k}, the manifest's totals say {totals[k]:,}"
    return None


class _Damaged(Exception):
    """index.arrow is present and stamped with manifest.json's bytes, but cannot be used (the reason)."""


def _matching_index(store: Storage) -> ShardIndex | None:
    """index.arrow, checked against manifest.json, or None: no index, or one of another manifest (a
    stale cache: the manifest decides, silently), or a damaged one (the manifest decides, with one
    warning naming the file and the fix). ``ShardError`` for a matching index whose head is not a
    manifest's (the manifest says the same)."""
    try:
        return _checked_index(store)
    except _Damaged as why:
        warnings.warn(f"{store.path(INDEX)}: damaged shard index ({why}): ignored, the shard list is read from "
                      f"{MANIFEST} instead (`packer index {store.root}` rewrites it)", stacklevel=4)
        return None


def damaged_index(store: Storage) -> str | None:
    """Why index.arrow of the build at ``store`` is damaged (``packer stats`` reports it), or None:
    absent, another manifest's (stale), or sound."""
    try:
        _checked_index(store, use=False)
    except _Damaged as why:
        return str(why)
    return None


def _checked_index(store: Storage, use: bool = True) -> ShardIndex | None:
    """``_matching_index``'s work; ``_Damaged`` where it warns (``use`` False: checked only, None)."""
    try:
        table, meta = _read_table(store)
    except FileNotFoundError:
        return None  # a build made before the index (or without one): the manifest, silently
    except _READ_ERRORS as err:  # unreadable, cut, not a regular file (a FIFO), damaged buffers
        if not store.local and store.size(INDEX) is None:
            return None  # (an object store's "not found" may come as another OSError)
        raise _Damaged(f"unreadable: {_first_line(err)}") from None
    try:
        if meta.get(_VERSION) != str(INDEX_VERSION).encode():
            return None  # another version's index: this reader does not know it
        size, want = int(meta[_SIZE]), meta[_HASH].decode()
    except _READ_ERRORS:
        raise _Damaged("its manifest stamp is unreadable") from None
    if store.local and store.size(MANIFEST) != size:  # (a stat first: a FIFO or a device is never opened here)
        return None
    if _manifest_hash(store) != (size, want):
        return None  # the manifest changed since (edited, or another build's index): a stale cache
    try:
        head = json.loads(meta[_HEAD])
    except _READ_ERRORS:
        raise _Damaged("its manifest head is unreadable") from None
    if not isinstance(head, dict) or "shards" in head:
        raise _Damaged("its manifest head is not a manifest's")
    check_manifest(head, store.path(MANIFEST), shards=False)  # the manifest's own head: refused as the manifest would be
    why = index_problem(table, head)
    if why:
        raise _Damaged(why)
    return ShardIndex(table, head, store.path(INDEX), store) if use else None


def _manifest_hash(store: Storage) -> tuple[int, str] | None:
    """(bytes, xxh3_128) of manifest.json, read in blocks (constant memory; on a store, one request
    for its size less)."""
    h, n = xxhash.xxh3_128(), 0
    try:
        if store.local:
            with open(store.path(MANIFEST), "rb") as f:
                while block := f.read(1 << 16):  # (64 KiB: packer stats hashes it too, and its memory must not grow with the manifest)
                    h.update(block)
                    n += len(block)
        else:
            data = store.read(MANIFEST)
            h.update(data)
            n = len(data)
    except OSError:
        return None
    return n, h.hexdigest()
