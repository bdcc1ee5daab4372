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

What is copied, and why (docs/dataset.md has the long form):

- Shards are memory-mapped, privately and copy-on-write
  (``torch.from_file(shared=False)``), lazily, by each process on first
  touch: nothing is read until a row is, no file descriptor stays open, and
  a tensor that views the map can be written to without touching the file.
- The token data is copied once per row read, into the output tensor: torch
  can neither embed nor index with uint16, so uint16 ids are widened. The
  one exception is ``input_ids_dtype=torch.int32`` over a uint32 build: then
  ``ds[i]["input_ids"]`` is a view of the map (uint32 ids are < 2**31).
- The piece index (``doc_lens``) is copied from the map into small NumPy
  arrays per shard when the shard is first touched: 32 bytes per row plus 8
  per piece, about 1% of the token bytes at seq_len 2048.
- ``labels`` is a second copy (it differs from input_ids); ``position_ids``
  is computed.

The DataLoader path: ``__getitems__`` (which DataLoader calls with a whole
batch of indices) builds the batch's (B, L) tensors in a few vectorised
NumPy operations and hands out rows that are views of them; ``collate``
sees that and returns those tensors without stacking again (in a worker
process it copies the whole batch into one shared-memory block instead:
see packer/train/batching.py).

Validation on open: every manifest (format version known), the builds agree
on seq_len, dtype, pad id and tokenizer fingerprint, every shard exists with
the manifest's byte size and a readable Arrow schema with the manifest's
row count. ``verify=True`` also hashes every shard (xxh3_128, against the
manifest) and checks every piece index: a full read of the build, off by
default. A shard's piece index is checked anyway when a process first maps
it, and every batch is checked for ids >= vocab_size; either failure raises
``ShardError`` naming the shard.
"""

from __future__ import annotations

import operator
import os
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import ShardCache, Storage, storage_for

IGNORE_INDEX = -100  # what torch's cross_entropy and HF models skip

# Counts forks of this process: a dataset whose maps were made under another
# count drops them and maps afresh (a DataLoader worker maps its own shards).
# Cheaper than os.getpid() on every read.
_forks = 0


def _after_fork() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere workers are spawned and unpickle a map-free copy
    os.register_at_fork(after_in_child=_after_fork)


@dataclass(frozen=True)
class BuildInfo:
    """One build of a PackedDataset; its rows are ``[start, start + rows)``."""

    path: str
    rows: int
    start: int
    manifest: dict


@dataclass(frozen=True)
class _ShardEntry:
    store: Storage  # the build's folder or prefix
    rel: str  # the shard's name in it, as the manifest gives it
    rows: int
    nbytes: int
    checksum: str

    @property
    def path(self) -> str:
        """The shard as messages name it (a path, or a URI)."""
        return self.store.path(self.rel)


class _Mapped:
    """One shard mapped in this process.

    ``tokens`` is a flat view of the mapped file in the shard dtype. ``row``
    is (rows, 4) int64: for row r, where its tokens start in ``tokens``, where
    its pieces start and end in ``lens`` (and ``slot``: where each piece
    starts in its row), and how many slots they fill. One fetch and
    ``tolist()`` per row read is cheaper than four NumPy scalar reads.
    """

    __slots__ = ("storage", "tokens", "row", "lens", "slot", "mem", "mask_at")

    def __init__(self, storage, tokens, row, lens, slot, mem=None, mask_at=None):
        self.storage = storage  # keeps the mapping alive
        self.tokens = tokens
        self.row = row
        self.lens = lens
        self.slot = slot
        self.mem = mem  # the mapped file as uint8 (where the loss mask is read)
        self.mask_at = mask_at  # (rows,) int64 byte offset of each row's loss_mask in mem; None: no loss_mask column

    def mask(self, j: int, seq_len: int) -> np.ndarray | None:
        """Row j's loss mask, (seq_len,) uint8 viewing the map (1 = trained), or None for a build without one."""
        if self.mask_at is None:
            return None
        a = int(self.mask_at[j])
        return self.mem[a:a + seq_len]


class Row(dict):
    """One row of a batch built by ``PackedDataset.__getitems__``: a dict with
    the keys of ``ds[i]``, whose tensors view the batch's.

    A real dict (not just a Mapping) because HF Trainer's column filter
    (``RemoveColumnsCollator``) passes anything else through untouched, and
    ``doc_lens`` (one length per piece: not stackable) then reaches
    ``default_data_collator``; as a dict it is dropped there, and the rows
    stack into (B, L) input_ids / labels / position_ids."""

    __slots__ = ("batch", "index")
    KEYS = ("input_ids", "labels", "position_ids", "doc_lens")

    def __init__(self, batch: dict, index: int):
        at = batch["_piece_at"]
        super().__init__(input_ids=batch["input_ids"][index], labels=batch["labels"][index],
                         position_ids=batch["position_ids"][index],
                         doc_lens=batch["_doc_lens"][int(at[index]):int(at[index + 1])])
        self.batch, self.index = batch, index

    def __repr__(self):
        return f"Row({self.index} of a batch of {self.batch['input_ids'].shape[0]})"


class Rows(Sequence):
    """The rows of a batch built by ``PackedDataset.__getitems__``; items are ``Row``s, made on access."""

    __slots__ = ("batch",)

    def __init__(self, batch: dict):
        self.batch = batch

    def __len__(self):
        return len(self.batch["_piece_at"]) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        return Row(self.batch, i % n)

    def __repr__(self):
        return f"Rows({len(self)} rows)"


class PackedDataset(Dataset):
    """Map-style dataset over all rows of one or more packer builds.

    ``paths``: a build folder, or a sequence of them (their rows are
    concatenated; use ``PackedSampler(weights=...)`` to mix them).
    ``verify``: hash every shard against the manifest on open (reads all).
    ``input_ids_dtype``: ``torch.int64`` (default) or ``torch.int32``.
    A build on object storage (``"s3://bucket/out"``) is read through a local
    cache: each shard is downloaded on first use, verified against the
    manifest as it arrives, then mapped (packer/shard_cache.py).
    ``cache_dir``: the cache folder (default ``~/.cache/packer/shards``);
    ``cache_max_bytes``: its bound, least recently used shards go first (None: no bound).
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike], *, verify: bool = False,
                 input_ids_dtype: torch.dtype = torch.int64, cache_dir: str | os.PathLike | None = None,
                 cache_max_bytes: int | None = None):
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
            real = os.path.realpath(p) if st.local else p.rstrip("/")
            if real in seen:
                raise PackerError(f"{p}: build named twice (as {seen[real]}); to weight it, use PackedSampler(weights=...)")
            seen[real] = p

        builds, entries, first = [], [], None
        for p in paths:
            store = storage_for(p)
            m = S.read_manifest(store)
            if first is None:
                first = (p, m)
            else:
                _check_compatible(first, (p, m))
            start = sum(b.rows for b in builds)
            rows = 0
            for sh in m["shards"]:
                try:
                    e = _ShardEntry(store, sh["path"], int(sh["rows"]), int(sh["bytes"]), sh.get(S.CHECKSUM, ""))
                    if not store.inside(e.rel):
                        raise ShardError(f"{store.path(S.MANIFEST)}: shard path {e.rel!r} points outside the build folder")
                except (KeyError, TypeError, ValueError):
                    raise ShardError(f"{os.path.join(p, S.MANIFEST)}: malformed shard entry {sh!r}") from None
                entries.append(e)
                rows += e.rows
            builds.append(BuildInfo(p, rows, start, m))
            if not store.local:  # shards are fetched on first use; here one listing checks their sizes
                _check_listed(store, entries[len(entries) - len(m["shards"]):])

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
        self._entries = tuple(entries)
        self._starts = np.cumsum([0] + [e.rows for e in entries], dtype=np.int64)
        self._len = int(self._starts[-1])
        self._cache = ShardCache(cache_dir, cache_max_bytes)  # used only by shards on object stores
        self._verify = verify
        for e in entries:
            if e.store.local:  # checked now where reads are cheap; a remote shard is checked as it is fetched
                _check_file(e, self.seq_len, self.dtype, verify)
        self._starts_list = self._starts.tolist()
        self._ids_np = np.int64 if input_ids_dtype == torch.int64 else np.int32
        if self._ids_np is np.int32 and self.vocab_size > 1 << 31:
            raise PackerError(f"vocab_size {self.vocab_size} does not fit input_ids_dtype=torch.int32")
        # uint32 ids are < 2**31 (vocab_size), so int32 can view them without a copy.
        self._ids_view = input_ids_dtype == torch.int32 and self.dtype == "uint32"
        self._arange = np.arange(self.seq_len, dtype=np.int64)
        # Ids >= vocab_size (a damaged shard) are caught on read, unless the dtype cannot hold any.
        self._check_ids = self.vocab_size < np.iinfo(self._np_dtype).max + 1
        self._arange_cache = self._arange
        self._fork = _forks  # maps made before a fork are dropped in the child
        self._maps: dict[int, _Mapped] = {}
        if verify:
            for k in range(len(entries)):
                self._map(k)  # checks every piece index

    # -- sizes --------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    @property
    def build_rows(self) -> tuple[int, ...]:
        """Rows per build, in the order given (what PackedSampler mixes)."""
        return tuple(b.rows for b in self.builds)

    @property
    def shard_paths(self) -> tuple[str, ...]:
        return tuple(e.path for e in self._entries)

    # -- pickling: never ship maps to another process -------------------------

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_maps"] = {}
        state["_arange_cache"] = self._arange
        return state

    # -- reading ------------------------------------------------------------

    def __getitem__(self, i) -> dict[str, torch.Tensor]:
        i = self._index(i)
        k = bisect_right(self._starts_list, i) - 1
        m = self._maps.get(k) if self._fork == _forks else None
        if m is None:
            m = self._mapped(k)
        j = i - self._starts_list[k]
        L = self.seq_len
        a, p0, p1, u = m.row[j].tolist()
        raw = m.tokens[a:a + L]
        if self._ids_view:
            ids = raw.view(np.int32)  # a view of the private map: no copy
            lab = raw.astype(np.int64)
        else:
            ids = raw.astype(self._ids_np)  # the one copy of the token data (widening)
            lab = ids.astype(np.int64)  # (a copy: labels differ from input_ids)
        if self._check_ids and lab.max() >= self.vocab_size:
            self._bad_token(lab[None, :], [k], [j])
        lens = m.lens[p0:p1]
        mask = m.mask(j, L)
        if mask is not None:  # a chat build: no loss where the loss mask is off (prompts, headers, padding)
            lab[mask == 0] = IGNORE_INDEX
        if p1 - p0 == 1 and u == L:  # one piece fills the row: the common case for long documents
            lab[0] = IGNORE_INDEX
            pos = self._arange.copy()
        else:
            slot = m.slot[p0:p1]
            lab[slot] = IGNORE_INDEX  # no prediction across a boundary
            if u < L:
                lab[u:] = IGNORE_INDEX  # none of or from padding
                pos = self._arange - np.repeat(np.append(slot, u), np.append(lens, L - u))
            else:
                pos = self._arange - np.repeat(slot, lens)
        return {
            "input_ids": torch.from_numpy(ids),
            "labels": torch.from_numpy(lab),
            "position_ids": torch.from_numpy(pos),
            "doc_lens": torch.from_numpy(lens.copy()),
        }

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
        row's pieces begin in it (what ``Row`` reads)."""
        idx = self._indices(indices)
        B, L = len(idx), self.seq_len
        if self._ids_np is np.int64:
            ids, lab, pos = np.empty((3, B, L), np.int64)  # one allocation
        else:
            ids, (lab, pos) = np.empty((B, L), self._ids_np), np.empty((2, B, L), np.int64)

        sid = np.searchsorted(self._starts, idx, side="right") - 1
        local = (idx - self._starts[sid]).tolist()
        used, counts, lens, segs = [], [0], [], []  # per row: slots filled, pieces, piece lengths, segments
        off = []  # (row, loss mask) of rows whose build has one
        maps = self._maps if self._fork == _forks else {}
        for r, k in enumerate(sid.tolist()):
            m = maps.get(k) or self._mapped(k)
            a, p0, p1, u = m.row[local[r]].tolist()
            ids[r] = m.tokens[a:a + L]  # the one copy of the token data (widening if uint16)
            if m.mask_at is not None:
                off.append((r, m.mask(local[r], L)))
            pl = m.lens[p0:p1]
            lens.append(pl)
            segs.append(pl)
            if u < L:
                segs.append(np.array([L - u], dtype=np.int32))  # the padding tail: a segment too
            counts.append(p1 - p0)
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

    def _bad_token(self, ids, sid, local):
        r = int(np.argmax(ids.max(axis=1) >= self.vocab_size))
        e = self._entries[int(sid[r])]
        raise ShardError(
            f"{e.path}: row {int(local[r])} holds token id {int(ids[r].max())} >= vocab_size {self.vocab_size} "
            "(corrupt shard? PackedDataset(verify=True) checks every byte against the manifest)"
        )

    # -- mapping --------------------------------------------------------------

    def _mapped(self, k: int) -> _Mapped:
        if self._fork != _forks:  # forked since: map afresh in this process
            self._fork, self._maps = _forks, {}
        m = self._maps.get(k)
        if m is None:
            m = self._maps[k] = self._map(k)
        return m

    def _map(self, k: int) -> _Mapped:
        e = self._entries[k]
        # A local shard is mapped where it is; a remote one is fetched into the
        # cache and mapped there (under its lock: see packer/io/cache.py).
        with e.store.local_copy(e.rel, e.nbytes, e.checksum, self._cache, verify=self._verify) as path:
            return _map_shard(e, path, self.seq_len, self._np_dtype)


# --------------------------------------------------------------------------
# Opening and checking shards.


def _check_compatible(a: tuple[str, dict], b: tuple[str, dict]) -> None:
    (pa_, ma), (pb, mb) = a, b
    for key, get in (
        ("seq_len", lambda m: m["seq_len"]),
        ("dtype", lambda m: m["dtype"]),
        ("pad_id", lambda m: m.get("pad_id")),
        ("tokenizer fingerprint", lambda m: m["tokenizer"].get("fingerprint")),
    ):
        if get(ma) != get(mb):
            raise PackerError(
                f"{pb}: {key} {get(mb)!r} differs from {get(ma)!r} in {pa_}; builds read together must agree"
            )


def _check_listed(store: Storage, entries: list[_ShardEntry]) -> None:
    """Every shard is in the store with its size: one listing."""
    objects = store.list()
    for e in entries:
        size = objects.get(e.rel)
        if size is None:
            raise ShardError(f"{e.path}: shard is missing")
        if size != e.nbytes:
            what = "truncated" if size < e.nbytes else "longer than the manifest says"
            raise ShardError(f"{e.path}: shard is {what} ({size} bytes, manifest says {e.nbytes})")


def _check_file(e: _ShardEntry, seq_len: int, dtype: str, verify: bool) -> None:
    """Cheap checks for every shard on open; ``verify`` adds the checksum."""
    try:
        size = os.path.getsize(e.path)
    except FileNotFoundError:
        raise ShardError(f"{e.path}: shard is missing") from None
    except OSError as err:
        raise ShardError(f"{e.path}: cannot read shard ({err.strerror})") from None
    if size != e.nbytes:
        what = "truncated" if size < e.nbytes else "longer than the manifest says"
        raise ShardError(f"{e.path}: shard is {what} ({size} bytes, manifest says {e.nbytes})")
    if verify:
        got = S.file_checksum(e.path)
        if got != e.checksum:
            raise ShardError(f"{e.path}: checksum mismatch ({S.CHECKSUM} {got}, manifest says {e.checksum}): shard is corrupt")
    table = S.open_shard(e.path, seq_len, dtype)
    if table.num_rows != e.rows:
        raise ShardError(f"{e.path}: {table.num_rows} rows, manifest says {e.rows}")


def _map_shard(e: _ShardEntry, path: str, seq_len: int, dt: np.dtype) -> _Mapped:
    """Map one shard (a local file at ``path``) privately and copy out its piece index, checking it."""
    try:
        storage = torch.from_file(path, shared=False, size=e.nbytes, dtype=torch.uint8)
    except RuntimeError as err:
        raise ShardError(f"{e.path}: cannot map shard ({str(err).splitlines()[0]})") from None
    mem = storage.numpy()  # writable: private pages
    table = S.open_shard_buffer(mem, e.path, seq_len, str(dt))
    if table.num_rows != e.rows:
        raise ShardError(f"{e.path}: {table.num_rows} rows, manifest says {e.rows}")
    base = mem.ctypes.data
    isz = dt.itemsize
    row_at, piece_at, lens = [], [np.zeros(1, np.int64)], []
    mask_at = [] if S.LOSS_MASK in table.schema.names else None
    n_pieces = 0
    for batch in table.to_batches():
        n = batch.num_rows
        if not n:
            continue
        ids, dl = batch.column("input_ids"), batch.column("doc_lens")
        child = ids.values
        addr = child.buffers()[1].address + (child.offset + ids.offset * seq_len) * isz
        off = addr - base
        if off < 0 or off % isz or off + n * seq_len * isz > len(mem):
            raise ShardError(f"{e.path}: input_ids lie outside the file: shard is corrupt")
        row_at.append(off // isz + np.arange(n, dtype=np.int64) * seq_len)
        if mask_at is not None:
            mk = batch.column(S.LOSS_MASK)  # (type checked by open_shard_buffer)
            mv = mk.values
            moff = mv.buffers()[1].address + mv.offset + mk.offset * seq_len - base
            if moff < 0 or moff + n * seq_len > len(mem):
                raise ShardError(f"{e.path}: loss_mask lies outside the file: shard is corrupt")
            mask_at.append(moff + np.arange(n, dtype=np.int64) * seq_len)
        offs = dl.offsets.to_numpy().astype(np.int64)
        vals = dl.values.to_numpy()
        if offs[0] < 0 or np.any(np.diff(offs) < 0) or offs[-1] > len(vals):
            raise ShardError(f"{e.path}: doc_lens offsets are out of order: shard is corrupt")
        lens.append(vals[offs[0]:offs[-1]])
        piece_at.append(offs[1:] - offs[0] + n_pieces)
        n_pieces += int(offs[-1] - offs[0])
    row_at = np.concatenate(row_at) if row_at else np.zeros(0, np.int64)
    piece_at = np.concatenate(piece_at)
    lens = np.concatenate(lens) if lens else np.zeros(0, np.uint32)
    if len(lens) and (lens.min() < 1 or lens.max() > seq_len):
        raise ShardError(f"{e.path}: a doc_lens entry is outside 1..{seq_len}: shard is corrupt")
    lens = lens.astype(np.int32)  # the copy of the index; int32 is what torch indexes with
    cum = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cum[1:])
    used = cum[piece_at[1:]] - cum[piece_at[:-1]]
    if len(used) and used.max() > seq_len:
        r = int(np.argmax(used > seq_len))
        raise ShardError(f"{e.path}: row {r}'s doc_lens sum to {int(used[r])} > seq_len {seq_len}: shard is corrupt")
    usable = len(mem) - len(mem) % isz
    tokens = mem[:usable].view(dt)
    del table  # the index is copied; the Arrow objects are not needed any more
    row_of_piece = np.repeat(np.arange(len(used), dtype=np.int64), np.diff(piece_at))
    slot = (cum[:-1] - cum[piece_at[:-1]][row_of_piece]).astype(np.int32)
    row = np.stack([row_at, piece_at[:-1], piece_at[1:], used], axis=1)
    if mask_at is not None:
        mask_at = np.concatenate(mask_at) if mask_at else np.zeros(0, np.int64)
    return _Mapped(storage, tokens, row, lens, slot, mem, mask_at)

