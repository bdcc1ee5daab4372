"""A build as an HF ``datasets.Dataset``, memory-mapped, with no copy of the shards.

``hf_dataset("out/")`` gives a ``datasets.Dataset`` whose table is the
build's shards, memory-mapped in place (one ``MemoryMappedTable`` a shard,
concatenated in manifest order): the token data is not copied, and pickling
it (``map(num_proc=...)``, DataLoader workers) sends file paths, not data.

Beside each shard's columns it serves two of its own, computed once per
shard and kept in datasets' cache folder (``datasets.config.HF_DATASETS_CACHE``
/ ``packer`` / a digest of the build), memory-mapped like the shards:

- ``labels``: int64, ``input_ids`` with -100 on the padding tail, at the
  first slot of every piece and, in a ``--chat`` build, wherever the
  ``loss_mask`` is 0 (what ``PackedDataset`` gives as ``labels``);
- ``seq_lengths``: the row's segments: its piece lengths, then the padding
  tail's length where the row has one (they sum to ``seq_len``);
- ``position_ids``: int64, restarting at 0 at every segment (what
  ``PackedDataset`` gives): HF Trainer's ``default_data_collator`` stacks
  it and passes it to the model, which then finds the documents (sdpa and
  eager with no cache and no ``attention_mask``, flash-attention, packer's
  attention); without it each row would be one sequence, its documents
  attending to each other.

These are the columns TRL's SFTTrainer reads from packed rows
(docs/training.md): with ``padding_free=True`` its collator restarts
positions at each segment and trains exactly on ``labels``.
``labels=False`` leaves ``labels`` out (8 bytes a slot less in the cache).

Nothing done through the dataset writes into the build folder: datasets
puts the cache files of ``map``, ``filter``, ``shuffle``, ``select`` and
``train_test_split`` beside the first file of the table, and that is the
first shard's file of packer's own columns, in datasets' cache folder.

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

IGNORE_INDEX = -100
SIDE_VERSION = 2  # of the columns' file: a new version is a new file name
MAP_MARGIN = 4096  # maps left for what the process maps later (datasets' own cache files, torch, workers' imports)


def hf_dataset(path: str, *, verify: bool = False, labels: bool = True):
    """The local build at ``path`` as a memory-mapped ``datasets.Dataset`` (see the module docstring)."""
    try:
        import datasets
        from datasets.table import ConcatenationTable, MemoryMappedTable

        from ._arrow_file_table import ArrowFileTable
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
    cache = os.path.join(str(datasets.config.HF_DATASETS_CACHE), "packer", f"{digest}-v{SIDE_VERSION}")
    blocks = []
    for sh in m["shards"]:
        f = os.path.join(path, sh["path"])
        table = _checked_shard(f, sh, seq_len, dtype, verify)
        if table.num_rows == 0:  # a unit whose slice held no document: no rows to add (datasets
            continue  # cannot concatenate a table of no record batches)
        side = _side_file(cache, sh, table, seq_len, labels)
        blocks.append([MemoryMappedTable.from_file(side), ArrowFileTable.from_file(f)])
    if not blocks:
        raise ShardError(f"{path}: the build has no rows")
    return datasets.Dataset(ConcatenationTable.from_blocks(blocks),
                            info=datasets.DatasetInfo(description=f"packer build {path}"),
                            fingerprint=f"packer-{digest}-{int(labels)}")


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


def _side_file(cache: str, sh: dict, table: pa.Table, L: int, labels: bool) -> str:
    """The Arrow stream file of packer's columns for one shard, made now if the cache lacks it."""
    stem = os.path.basename(sh["path"]).rsplit(".", 1)[0]
    name = f"packer-{stem}-{str(sh.get('xxh3_128', 'x'))[:16]}-{'labels' if labels else 'lengths'}.arrow"
    dest = os.path.join(cache, name)
    if _readable(dest, table.num_rows):
        return dest
    try:
        os.makedirs(cache, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=cache)
    except OSError as e:
        raise PackerError(f"{cache}: cannot write hf_dataset's columns into datasets' cache folder "
                          f"({e.strerror}); set HF_DATASETS_CACHE to a writable folder") from None
    try:
        with os.fdopen(fd, "wb") as out, pa.ipc.new_stream(out, _side_schema(L, labels)) as w:
            for batch in table.to_batches(max_chunksize=1024):
                w.write_batch(_side_batch(batch, L, labels, sh["path"]))
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


def _side_schema(L: int, labels: bool) -> pa.Schema:
    fields = [pa.field("labels", pa.list_(pa.int64(), L), nullable=False)] if labels else []
    return pa.schema(fields + [pa.field("seq_lengths", pa.list_(pa.int32()), nullable=False),
                               pa.field("position_ids", pa.list_(pa.int64(), L), nullable=False)])


def _side_batch(batch: pa.RecordBatch, L: int, labels: bool, name: str) -> pa.RecordBatch:
    """One record batch of ``labels`` / ``seq_lengths`` for a batch of shard rows (vectorised)."""
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
    # position_ids: each slot's distance from its segment's start (a row's segments sum to L, so they
    # tile the batch's n * L slots in order)
    starts = np.cumsum(seg, dtype=np.int64) - seg
    pos = np.arange(n * L, dtype=np.int64) - np.repeat(starts, seg)
    cols = [pa.ListArray.from_arrays(pa.array(seg_off.astype(np.int32)), pa.array(seg)),
            pa.FixedSizeListArray.from_arrays(pa.array(pos), L)]
    if labels:
        lab = np.asarray(batch.column("input_ids").flatten()).astype(np.int64).reshape(n, L)
        lab[np.arange(L)[None, :] >= used[:, None]] = IGNORE_INDEX  # the padding tail
        ends = np.concatenate([[0], np.cumsum(lens)])
        starts = ends[:-1] - ends[off[row_of_piece]]
        lab[row_of_piece, starts] = IGNORE_INDEX  # no prediction across a boundary
        if LOSS_MASK in batch.schema.names:  # a chat build: no loss where the mask is off
            mask = np.asarray(batch.column(LOSS_MASK).flatten()).reshape(n, L)
            lab[mask == 0] = IGNORE_INDEX
        cols.insert(0, pa.FixedSizeListArray.from_arrays(pa.array(lab.reshape(-1)), L))
    return pa.RecordBatch.from_arrays(cols, schema=_side_schema(L, labels))
