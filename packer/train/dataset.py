"""PackedDataset: the rows of one or more packer builds as training tensors.

``PackedDataset("out/")`` is a map-style ``torch.utils.data.Dataset`` over
every row of every shard, in manifest order (several builds: concatenated in
the order given). ``ds[i]`` is one packed row of ``L = seq_len`` slots::

    input_ids     (L,)  int64   token ids (``input_ids_dtype`` to change)
    labels        (L,)  int64   input_ids, but -100 at the first slot of every
                                piece and on padding (HF convention: the
                                model shifts, so no loss term predicts a token
                                from another document or from padding)
    position_ids  (L,)  int64   0, 1, 2, ... restarting at every piece; the
                                padding tail counts as one more piece
    doc_lens      (P,)  int32   the piece lengths of the row, as in the shard

What is copied, and why (docs/dataset.md has the long form): shards are
memory-mapped privately (copy-on-write) by each process on first touch; the
token data is copied once per row read (widened: torch cannot index with
uint16), except for ``input_ids_dtype=torch.int32`` over a uint32 build, a
view of the map; a shard's piece index is copied into small NumPy arrays when
it is mapped (32 bytes per row plus 8 per piece); ``labels`` is a second
copy, ``position_ids`` is computed.

The DataLoader path: ``__getitems__`` (which DataLoader calls with a whole
batch of indices) builds the batch's (B, L) tensors in a few vectorised
NumPy operations and hands out rows that are views of them; ``collate``
sees that and returns those tensors without stacking again (in a worker
process it copies the whole batch into one shared-memory block instead:
see packer/train/batching.py).

Opening a build reads two files whatever its number of shards: manifest.json (hashed, in blocks) and
index.arrow beside it, memory-mapped (packer/shards/index.py; without an index, the manifest's list).
Checked on open: every manifest (format version known), the builds agree on seq_len, dtype, pad id and
tokenizer fingerprint, no shard path leaves its build. A shard is checked when a process first uses it:
read by the row layout its index records (packer/shards/shard_file.py: no Arrow parsed) its tail and
layout against their stamp; else mapped, a regular file of the manifest's size, a readable Arrow schema
with its row count, its piece index, its ``loss_mask`` in a chat build; every batch for ids >= vocab_size;
and (``verify="background"``, the default) hashed (xxh3_128, against the manifest) by a thread while rows
are read, a shard that differs failing from the next read on (packer/train/shard_hash.py). Each failure
raises ``ShardError`` naming the shard. ``verify=True`` does all of that for every shard on open (a full
read first); ``verify=False`` hashes nothing. A process keeps at most ``max_open_shards`` shards mapped
(least recently used go first): its memory and count of memory maps do not grow with the build.
"""

from __future__ import annotations

import operator
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import ShardCache, storage_for
from .rows import Row, Rows  # noqa: F401 (Row re-exported: where it always was)
from .shard_hash import BACKGROUND, BackgroundHash, verify_mode
from .shard_map import ShardEntry, ShardTable, check_checksum, check_compatible, check_size, verify_all  # noqa: F401

IGNORE_INDEX = -100  # what torch's cross_entropy and HF models skip

MAX_OPEN_SHARDS = 128  # shards a process keeps mapped (each one memory map and its piece index)


class _Forks:
    """Counts forks of this process: a dataset whose maps were made under another
    count drops them and maps afresh (a DataLoader worker maps its own shards).
    Cheaper than os.getpid() on every read."""

    count = 0

    @classmethod
    def after(cls) -> None:
        cls.count += 1


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere workers are spawned and unpickle a map-free copy
    os.register_at_fork(after_in_child=_Forks.after)


@dataclass(frozen=True)
class BuildInfo:
    """One build of a PackedDataset; its rows are ``[start, start + rows)``."""

    path: str
    rows: int
    start: int
    manifest: dict


class PackedDataset(Dataset):
    """Map-style dataset over all rows of one or more packer builds.

    ``paths``: a build folder, or a sequence of them (their rows are
    concatenated; use ``PackedSampler(weights=...)`` to mix them).
    ``verify``: "background" (default): each shard hashed against the manifest, in a thread, when this process
    first reads it, and a shard that differs refused from the next read on; True: every shard on open (reads
    all first); False: none.
    ``input_ids_dtype``: ``torch.int64`` (default) or ``torch.int32``.
    A build on object storage (``"s3://bucket/out"``) is read through a local
    cache: each shard is downloaded on first use, verified against the
    manifest as it arrives, then mapped (packer/io/cache.py).
    ``cache_dir``: the cache folder (default ``~/.cache/packer/shards``);
    ``cache_max_bytes``: its bound, least recently used shards go first (None: no bound).
    ``max_open_shards``: shards this process keeps mapped at once (least recently used are unmapped).
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike], *, verify: bool | str = BACKGROUND,
                 input_ids_dtype: torch.dtype = torch.int64, cache_dir: str | os.PathLike | None = None,
                 cache_max_bytes: int | None = None, max_open_shards: int = MAX_OPEN_SHARDS):
        """Longer than 60 lines: every check a build must pass on open, in order, each one line."""
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        paths = [os.fspath(p) for p in paths]
        if not paths:
            raise PackerError("PackedDataset needs at least one build folder")
        if input_ids_dtype not in (torch.int64, torch.int32):
            raise PackerError(f"input_ids_dtype must be torch.int64 or torch.int32, not {input_ids_dtype}")
        seen: dict[str, str] = {}
        for p in paths:
            st = storage_for(p)
            real = st.identity()
            if real in seen:
                raise PackerError(f"{p}: build named twice (as {seen[real]}); to weight it, use PackedSampler(weights=...)")
            seen[real] = p

        builds, stores, indexes, first = [], [], [], None
        for p in paths:
            store = storage_for(p)
            x = S.open_index(store)  # two files: the manifest (hashed) and its index (mapped)
            m = x.head
            if first is None:
                first = (p, m)
            else:
                check_compatible(first, (p, m))
            bad = x.outside()
            if bad is not None:
                raise ShardError(f"{store.path(S.MANIFEST)}: shard path {bad!r} points outside the build folder")
            builds.append(BuildInfo(p, x.total_rows, sum(b.rows for b in builds), m))
            stores.append(store)
            indexes.append(x)
        self._shards = ShardTable(stores, indexes, [S.LOSS_MASK in b.manifest.get("columns", []) for b in builds])

        m = first[1]
        self.builds: tuple[BuildInfo, ...] = tuple(builds)
        self.seq_len: int = int(m["seq_len"])
        self.dtype: str = m["dtype"]  # storage dtype of input_ids: uint16 or uint32
        self.pad_id: int = m.get("pad_id")
        self.eos_id: int | None = m.get("eos_id")
        self.vocab_size: int = int(m.get("vocab_size") or m["tokenizer"]["vocab_size"])
        self.tokenizer_fingerprint: str = m["tokenizer"].get("fingerprint")
        self.input_ids_dtype = input_ids_dtype
        self._np_dtype = np.dtype(self.dtype)
        self._len = sum(b.rows for b in builds)
        self._cache = ShardCache(cache_dir, cache_max_bytes)  # used only by shards on object stores
        self._verify, self._hash = verify_mode(verify), BackgroundHash()
        if max_open_shards < 1:
            raise PackerError(f"max_open_shards must be >= 1, got {max_open_shards}")
        self._max_open = int(max_open_shards)
        self._ids_np = np.int64 if input_ids_dtype == torch.int64 else np.int32
        if self._ids_np is np.int32 and self.vocab_size > 1 << 31:
            raise PackerError(f"vocab_size {self.vocab_size} does not fit input_ids_dtype=torch.int32")
        # uint32 ids are < 2**31 (vocab_size), so int32 can view them without a copy.
        self._ids_view = input_ids_dtype == torch.int32 and self.dtype == "uint32"
        self._arange = np.arange(self.seq_len, dtype=np.int64)
        # Ids >= vocab_size (a damaged shard) are caught on read, unless the dtype cannot hold any.
        self._check_ids = self.vocab_size < np.iinfo(self._np_dtype).max + 1
        self._arange_cache = self._arange
        self._fork = _Forks.count  # maps made before a fork are dropped in the child
        self._maps: OrderedDict[int, S.Mapped] = OrderedDict()
        if self._verify is True:
            verify_all(self._shards.n, self._check)  # every shard, in threads

    # -- sizes --------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    @property
    def build_rows(self) -> tuple[int, ...]:
        """Rows per build, in the order given (what PackedSampler mixes)."""
        return tuple(b.rows for b in self.builds)

    num_shards = property(lambda self: self._shards.n)

    @property
    def shard_starts(self) -> np.ndarray:
        """Every shard's first row, (num_shards,) int64 in this dataset's row numbering (PackedSampler's blocks)."""
        return self._shards.starts()

    @property
    def shard_paths(self) -> tuple[str, ...]:
        """Every shard's path (a tuple as long as the build: for small builds and messages)."""
        return tuple(self._shards.entry(k).path for k in range(self._shards.n))

    # -- pickling: never ship maps to another process -------------------------

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_maps"] = OrderedDict()
        state["_arange_cache"] = self._arange
        return state

    # -- reading ------------------------------------------------------------

    def __getitem__(self, i) -> dict[str, torch.Tensor]:
        k, j = self._shards.locate(self._index(i))
        raw, lens, u, mask = self._mapped(k).fetch(j)
        L = self.seq_len
        if self._ids_view:
            ids = raw.view(np.int32)  # a view of the private map: no copy
            lab = raw.astype(np.int64)
        else:
            ids = raw.astype(self._ids_np)  # the one copy of the token data (widening)
            lab = ids.astype(np.int64)  # (a copy: labels differ from input_ids)
        if self._check_ids and lab.max() >= self.vocab_size:
            self._bad_token(lab[None, :], [k], [j])
        if mask is not None:  # a chat build: no loss where the loss mask is off (prompts, headers, padding)
            lab[mask == 0] = IGNORE_INDEX
        if len(lens) == 1 and u == L:  # one piece fills the row: the common case for long documents
            lab[0] = IGNORE_INDEX
            pos = self._arange.copy()
        else:
            slot = np.cumsum(lens) - lens  # where each piece starts in the row
            lab[slot] = IGNORE_INDEX  # no prediction across a boundary
            if u < L:
                lab[u:] = IGNORE_INDEX  # none of or from padding
                pos = self._arange - np.repeat(np.append(slot, u), np.append(lens, L - u))
            else:
                pos = self._arange - np.repeat(slot, lens)
        return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(lab),
                "position_ids": torch.from_numpy(pos), "doc_lens": torch.from_numpy(lens.copy())}

    def __getitems__(self, indices) -> "Rows":
        """Rows ``indices``, built together (DataLoader calls this with a whole batch).

        Returns ``Rows``, a sequence of ``Row``: dicts with the keys of
        ``ds[i]``, whose tensors are views of the batch's (B, L) tensors,
        made when read. ``collate`` takes the batch tensors
        themselves, without stacking.
        """
        return Rows(self.batch(indices))

    def batch(self, indices) -> dict:
        """Rows ``indices`` as one batch: what ``collate([ds[i] for i in indices])``
        returns (input_ids, labels, position_ids, document_ids, cu_seqlens,
        max_seqlen), built directly. Also ``_doc_lens`` (P,) int32, the pieces of
        all rows in order, and ``_piece_at`` (B + 1,) int64 NumPy, where each
        row's pieces begin in it (what ``Row`` reads).
        Longer than 60 lines: the vectorised gather of a batch, whose index arrays each step reuses.
        """
        idx = self._indices(indices)
        B, L = len(idx), self.seq_len
        if self._ids_np is np.int64:
            ids, lab, pos = np.empty((3, B, L), np.int64)  # one allocation
        else:
            ids, (lab, pos) = np.empty((B, L), self._ids_np), np.empty((2, B, L), np.int64)

        sid, local = self._shards.locate_many(idx)
        local = local.tolist()
        used, counts, lens, segs = [], [0], [], []  # per row: slots filled, pieces, piece lengths, segments
        off = []  # (row, loss mask) of rows whose build has one
        for r, k in enumerate(sid.tolist()):
            raw, pl, u, mask = self._mapped(k).fetch(local[r])
            ids[r] = raw  # the one copy of the token data (widening if uint16)
            if mask is not None:
                off.append((r, mask))
            lens.append(pl)
            segs.append(pl)
            if u < L:
                segs.append(np.array([L - u], dtype=np.int32))  # the padding tail: a segment too
            counts.append(len(pl))
            used.append(u)
        if B and self._check_ids and ids.max() >= self.vocab_size:
            self._bad_token(ids, sid, local)

        # Segments in slot order over the flattened batch; a slot's position is
        # its distance from the start of its segment.
        seg = np.concatenate(segs) if B else np.zeros(0, np.int32)
        S = len(seg)
        np.copyto(lab, ids)
        if S == B:  # every row one piece that fills it (long documents): positions are 0..L-1
            pos[:] = self._arange
            lab[:, 0] = IGNORE_INDEX
            cu = np.arange(0, B * L + 1, L, dtype=np.int32)
            doc = np.repeat(np.arange(B, dtype=np.int32), L).reshape(B, L)
        else:
            cu = np.empty(S + 1, dtype=np.int32)
            cu[0] = 0
            np.cumsum(seg, out=cu[1:])
            seg_start = cu[:-1].astype(np.int64)
            np.subtract(self._flat_arange(B * L), np.repeat(seg_start, seg), out=pos.reshape(-1))
            lab.reshape(-1)[seg_start] = IGNORE_INDEX  # no prediction across a boundary
            for r, u in enumerate(used):
                if u < L:
                    lab[r, u:] = IGNORE_INDEX  # none of or from padding
            doc = np.repeat(np.arange(S, dtype=np.int32), seg).reshape(B, L)
        for r, mask in off:  # chat builds: no loss where the loss mask is off
            lab[r, mask == 0] = IGNORE_INDEX
        return {
            "input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(lab), "position_ids": torch.from_numpy(pos),
            "document_ids": torch.from_numpy(doc), "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": int(seg.max()) if S else 0,
            "_doc_lens": torch.from_numpy(np.concatenate(lens) if B else np.zeros(0, np.int32)),
            "_piece_at": np.cumsum(counts, dtype=np.int64),
        }

    def _flat_arange(self, n: int) -> np.ndarray:
        if len(self._arange_cache) < n:
            self._arange_cache = np.arange(n, dtype=np.int64)
        return self._arange_cache[:n]

    def _indices(self, indices) -> np.ndarray:
        if isinstance(indices, torch.Tensor):
            indices = indices.numpy(force=True)
        idx = np.asarray(indices)
        if idx.dtype != np.int64:
            if idx.size and idx.dtype.kind not in "iu":
                raise TypeError(f"PackedDataset indices are integers, not {idx.dtype}")
            idx = idx.astype(np.int64)
        idx = idx.reshape(-1)
        # Python's min/max: cheaper than two NumPy reductions for a batch of a few ints.
        lo, hi = (min(indices), max(indices)) if type(indices) is list and indices else (idx.min(), idx.max()) if idx.size else (0, -1)
        if lo < 0 or hi >= self._len:
            idx = np.where(idx < 0, idx + self._len, idx)  # from the end, as for ds[i]
            if idx.min() < 0 or idx.max() >= self._len:
                raise IndexError(f"row index out of range for PackedDataset of {self._len} rows")
        return idx

    def _index(self, i) -> int:
        try:
            i = operator.index(i)  # ints, NumPy ints, 0-d integer tensors; not floats or strings
        except TypeError:
            raise TypeError(f"PackedDataset indices are integers, not {type(i).__name__}") from None
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"row {i} out of range for PackedDataset of {self._len} rows")
        return i

    def wait_for_checks(self) -> None:
        """Until this process's background hashes of the shards it has read so far are done (tests, epoch ends)."""
        self._hash.wait()

    def _bad_token(self, ids, sid, local):
        r = int(np.argmax(ids.max(axis=1) >= self.vocab_size))
        e = self._shards.entry(int(sid[r]))
        raise ShardError(
            f"{e.path}: row {int(local[r])} holds token id {int(ids[r].max())} >= vocab_size {self.vocab_size} "
            "(corrupt shard? PackedDataset(verify=True) checks every byte against the manifest)"
        )

    # -- mapping --------------------------------------------------------------

    def _mapped(self, k: int) -> S.Mapped:
        """Shard ``k`` mapped in this process: the least recently used map goes when there are too many."""
        if self._fork != _Forks.count:  # forked since: map afresh in this process
            self._fork, self._maps = _Forks.count, OrderedDict()
        if self._hash.failed:
            self._hash.check(k)  # found corrupt by its background hash
        m = self._maps.get(k)
        if m is None:
            m = self._maps[k] = self._map(k)
            if self._verify == BACKGROUND:
                self._hash.submit(k, self._shards.entry(k))
            if len(self._maps) > self._max_open:
                self._maps.popitem(last=False)  # rows handed out keep their own reference to the map
        else:
            self._maps.move_to_end(k)
        return m

    def _map(self, k: int) -> S.Mapped | S.ShardFile:
        """Shard ``k`` opened, checked first (its first use in this process): read by the row layout its
        index records (no map, no Arrow parsed), else mapped and its footer read."""
        layout = self._shards.layout(k) if S.READ_BY_LAYOUT else None
        if layout is not None:
            return S.ShardFile(self._shards.entry(k, checksum=False), layout, self.seq_len, self._np_dtype)
        e = self._shards.entry(k)
        if e.store.reads_in_place:
            check_size(e)
        # A local shard is mapped where it is; a remote one is fetched into the
        # cache and mapped there (under its lock: see packer/io/cache.py).
        with e.store.local_copy(e.rel, e.nbytes, e.checksum, self._cache, verify=self._verify is True) as path:
            return S.map_shard(e, path, self.seq_len, self._np_dtype)

    def _check(self, k: int) -> None:
        """Every check of shard ``k``, its checksum included (``verify=True``); nothing kept mapped."""
        e, layout = self._shards.entry(k), self._shards.layout(k)
        if e.store.reads_in_place:
            check_size(e)
            check_checksum(e)
        with e.store.local_copy(e.rel, e.nbytes, e.checksum, self._cache, verify=True) as path:
            m = S.map_shard(e, path, self.seq_len, self._np_dtype)
        m.check_all()
        if layout is not None:
            S.check_layout(e, m, layout, self.dtype)
