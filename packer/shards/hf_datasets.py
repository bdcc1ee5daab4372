"""A build as an HF ``datasets.Dataset``, memory-mapped, with no copy of the shards.

``hf_dataset("out/")`` gives a ``datasets.Dataset`` whose table is the
build's shards, memory-mapped in place (one ``MemoryMappedTable`` a shard,
concatenated in manifest order): the token data is not copied, and pickling
it (``map(num_proc=...)``, DataLoader workers) sends file paths, not data.

Beside each shard's columns it serves three of its own. One is stored,
computed once per shard into ``cache_dir`` (default: datasets' cache folder,
``datasets.config.HF_DATASETS_CACHE`` / ``packer``) / a digest of the build,
memory-mapped like the shards; it is all that is written (4 bytes a document
piece and a row: a few percent of the build):

- ``seq_lengths``: the row's segments: its piece lengths, then the padding
  tail's length where the row has one (they sum to ``seq_len``).

Two are made as each row is read (a datasets transform, _hf_rows.py), never
written: as int64 they would be 16 bytes a slot, 8x a uint16 build:

- ``labels``: ``input_ids`` unshifted (the model shifts them, as HF expects)
  with -100 on the padding tail, at the first slot of every piece and, in a
  ``--chat`` build, wherever the ``loss_mask`` is 0 (what ``PackedDataset``
  gives as ``labels``);
- ``position_ids``: restarting at 0 at every segment (what
  ``PackedDataset`` gives): HF Trainer's ``default_data_collator`` stacks
  it and passes it to the model, which then finds the documents (sdpa and
  eager with no cache and no ``attention_mask``, flash-attention, packer's
  attention); without it each row would be one sequence, its documents
  attending to each other.

These are the columns TRL's SFTTrainer reads from packed rows
(docs/training.md): with ``padding_free=True`` its collator restarts
positions at each segment and trains exactly on ``labels`` (TRL refuses to
prepare a dataset with a transform: pass ``dataset_kwargs={"skip_prepare_dataset":
True}``, the rows being ready). ``labels=False`` leaves ``labels`` out. The two
made columns are in every row (``ds[i]``, ``ds[a:b]``, ``ds["labels"]``, which
reads every row) but not in ``column_names``; ``remove_columns`` (HF Trainer
removes what its model's forward does not take) hides a column they are made
from rather than dropping it. ``with_format("torch")`` replaces the transform:
use ``ds.with_transform`` or a collator instead.

Nothing done through the dataset writes into the build folder: datasets
puts the cache files of ``map``, ``filter``, ``shuffle``, ``select`` and
``train_test_split`` beside the first file of the table, and that is the
first shard's seq_lengths file, in ``cache_dir``.

Why not datasets' own readers: ``Dataset.from_file`` reads the Arrow IPC
*stream* format, and packer writes the IPC *file* format (random access,
what ``pyarrow.ipc.open_file`` and ``torch.from_file`` maps need), so it
fails; ``load_dataset("arrow", data_files=...)`` reads them but writes a
copy of every shard into its cache. ``ArrowFileTable`` only swaps the reader.

Scale: every shard stays mapped twice and costs about 3.5 ms to open and 270 KB of memory (10,000
shards: 36 s and 2.7 GB, measured on the dev machine; docs/scale.md), so a build of more shards than
``vm.max_map_count`` allows is refused in one line naming PackedDataset, which has no such bound.

Checks: every shard is opened and its schema checked (one ``ShardError``
naming it); a chat build's shard must hold its ``loss_mask``;
``verify=True`` also hashes every shard against the manifest and checks
its piece index (a full read, as ``PackedDataset(verify=True)``).
Local builds only (``PackedDataset`` reads object storage through its cache).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pyarrow as pa

from ..errors import PackerError, ShardError
from .manifest import read_manifest
from .reader import open_shard
from .schema import LOSS_MASK, checksum, file_checksum

SIDE_VERSION = 3  # of the columns' file: a new version is a new file name
MAP_MARGIN = 4096  # maps left for what the process maps later (datasets' own cache files, torch, workers' imports)


def hf_dataset(path: str, *, verify: bool = False, labels: bool = True, cache_dir: str | None = None):
    """The local build at ``path`` as a memory-mapped ``datasets.Dataset`` (see the module docstring).

    Writes one small file a shard, its ``seq_lengths`` (4 bytes a document piece, 4 a row), into
    ``cache_dir`` (default: datasets' cache folder, ``HF_DATASETS_CACHE``/packer/<digest>); ``labels``
    and ``position_ids`` are made as rows are read, written nowhere."""
    try:
        import datasets
        from datasets.table import ConcatenationTable, MemoryMappedTable

        from ._arrow_file_table import ArrowFileTable
        from ._hf_rows import PackedRows, Rows
    except ImportError as e:
        raise PackerError(f"hf_dataset needs the datasets package (pip install datasets): {e}") from None
    if "://" in str(path):
        raise PackerError(f"{path}: hf_dataset reads local builds; download the build first, or use PackedDataset")
    path = os.fspath(path)
    m = read_manifest(path)
    if not m["shards"]:
        raise ShardError(f"{path}: the build has no shards")
    seq_len, dtype = int(m["seq_len"]), m["dtype"]
    _check_maps(path, len(m["shards"]))
    # the fingerprint from the shards' checksums: datasets would otherwise hash the whole table
    digest = checksum("\n".join(f"{sh['path']} {sh.get('xxh3_128', '')}" for sh in m["shards"]).encode())[:32]
    root = os.fspath(cache_dir) if cache_dir is not None else os.path.join(str(datasets.config.HF_DATASETS_CACHE), "packer")
    cache = os.path.join(root, f"{digest}-v{SIDE_VERSION}")
    blocks = []
    for sh in m["shards"]:
        f = os.path.join(path, sh["path"])
        table = _checked_shard(f, sh, seq_len, dtype, verify)
        if table.num_rows == 0:  # a unit whose slice held no document: no rows to add (datasets
            continue  # cannot concatenate a table of no record batches)
        side = _side_file(cache, sh, table, seq_len)
        blocks.append([MemoryMappedTable.from_file(side), ArrowFileTable.from_file(f)])
    if not blocks:
        raise ShardError(f"{path}: the build has no rows")
    ds = PackedRows(ConcatenationTable.from_blocks(blocks), info=datasets.DatasetInfo(description=f"packer build {path}"),
                    fingerprint=f"packer-{digest}-{int(labels)}")
    return ds.with_transform(Rows(seq_len, labels))


def _check_maps(path: str, shards: int) -> None:
    """Refuse, in one line, a build whose maps would pass the system's cap: datasets keeps every table
    of the dataset mapped, two a shard (the shard, packer's columns), and past ``vm.max_map_count`` a
    map fails part way with an out-of-memory error. Linux only (elsewhere there is no such count)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            cap = int(f.read())
        with open("/proc/self/maps", "rb") as f:
            used = sum(1 for _ in f)
    except (OSError, ValueError):
        return
    if used + 2 * shards + MAP_MARGIN > cap:
        raise PackerError(f"{path}: hf_dataset maps each of its {shards:,} shards twice, {2 * shards:,} memory maps, "
                          f"past this system's vm.max_map_count of {cap:,} ({used:,} in use); use PackedDataset "
                          "(at most max_open_shards maps a process), raise vm.max_map_count, or build with a larger --unit-mb")


def _checked_shard(f: str, sh: dict, seq_len: int, dtype: str, verify: bool) -> pa.Table:
    """The shard at ``f``, its schema checked; with ``verify``, its bytes and piece index too."""
    if verify:
        try:
            got = file_checksum(f)
        except FileNotFoundError:
            raise ShardError(f"{f}: shard is missing") from None
        if got != sh.get("xxh3_128"):
            raise ShardError(f"{f}: checksum mismatch (xxh3_128 {got}, manifest says {sh.get('xxh3_128')}): "
                             "shard is corrupt")
    table = open_shard(f, seq_len, dtype)  # one clear ShardError if missing or damaged
    if table.num_rows != int(sh.get("rows", table.num_rows)):
        raise ShardError(f"{f}: {table.num_rows} rows, manifest says {sh['rows']}")
    if "trained_tokens" in sh and LOSS_MASK not in table.schema.names:
        raise ShardError(f"{f}: a chat build's shard without its {LOSS_MASK} column: shard is corrupt "
                         "(it would train on every token)")
    if verify:
        for batch in table.to_batches():
            _pieces(batch, seq_len, f)
    return table


def _pieces(batch: pa.RecordBatch, L: int, f: str):
    """(per-row piece offsets, piece lengths, slots used per row) of ``batch``, checked."""
    col = batch.column("doc_lens")
    off = np.asarray(col.offsets, dtype=np.int64)
    lens = np.asarray(col.flatten(), dtype=np.int64)
    off = off - off[0]
    ends = np.concatenate([[0], np.cumsum(lens)])
    used = ends[off[1:]] - ends[off[:-1]]
    bad = (lens.min() <= 0 if len(lens) else False) or bool((used > L).any()) or bool((np.diff(off) == 0).any())
    for name in ("doc_index", "doc_offset"):
        other = np.asarray(batch.column(name).offsets, dtype=np.int64)
        bad = bad or not np.array_equal(other - other[0], off)
    if bad:
        raise ShardError(f"{f}: the piece index (doc_lens) does not fit the rows: shard is corrupt")
    return off, lens, used


def _side_file(cache: str, sh: dict, table: pa.Table, L: int) -> str:
    """The Arrow stream file of one shard's ``seq_lengths``, made now if the cache lacks it."""
    stem = os.path.basename(sh["path"]).rsplit(".", 1)[0]
    dest = os.path.join(cache, f"packer-{stem}-{str(sh.get('xxh3_128', 'x'))[:16]}-lengths.arrow")
    if _readable(dest, table.num_rows):
        return dest
    try:
        os.makedirs(cache, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=cache)
    except OSError as e:
        raise PackerError(f"{cache}: cannot write hf_dataset's seq_lengths column ({e.strerror}); pass "
                          "cache_dir= a writable folder, or set HF_DATASETS_CACHE") from None
    try:
        with os.fdopen(fd, "wb") as out, pa.ipc.new_stream(out, SIDE_SCHEMA) as w:
            for batch in table.to_batches(max_chunksize=1024):
                w.write_batch(_side_batch(batch, L, sh["path"]))
        os.replace(tmp, dest)  # atomic: another process making the same file makes the same bytes
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return dest


def _readable(path: str, rows: int) -> bool:
    try:
        with pa.memory_map(path, "r") as src:
            return pa.ipc.open_stream(src).read_all().num_rows == rows
    except (OSError, pa.ArrowInvalid):
        return False


SIDE_SCHEMA = pa.schema([pa.field("seq_lengths", pa.list_(pa.int32()), nullable=False)])


def _side_batch(batch: pa.RecordBatch, L: int, name: str) -> pa.RecordBatch:
    """One record batch of ``seq_lengths`` for a batch of shard rows (vectorised)."""
    n = batch.num_rows
    off, lens, used = _pieces(batch, L, name)
    tail = (used < L).astype(np.int64)
    # seq_lengths: each row's pieces, then its padding tail as one more segment
    seg_off = off + np.concatenate([[0], np.cumsum(tail)])
    seg = np.empty(int(seg_off[-1]), dtype=np.int32)
    row_of_piece = np.repeat(np.arange(n), np.diff(off))
    seg[np.arange(len(lens)) - off[row_of_piece] + seg_off[row_of_piece]] = lens
    has = np.flatnonzero(tail)
    seg[seg_off[has + 1] - 1] = L - used[has]
    return pa.RecordBatch.from_arrays([pa.ListArray.from_arrays(pa.array(seg_off.astype(np.int32)), pa.array(seg))],
                                      schema=SIDE_SCHEMA)
