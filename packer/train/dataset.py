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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import ShardCache, storage_for
from .rows import Row, Rows  # noqa: F401 (Row re-exported: where it always was)
from .shard_map import Mapped, ShardEntry, check_compatible, check_file, check_listed, map_shard

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
                check_compatible(first, (p, m))
            start = sum(b.rows for b in builds)
            rows = 0
            for sh in m["shards"]:
                try:
                    e = ShardEntry(store, sh["path"], int(sh["rows"]), int(sh["bytes"]), sh.get(S.CHECKSUM, ""))
                    if not store.inside(e.rel):
                        raise ShardError(f"{store.path(S.MANIFEST)}: shard path {e.rel!r} points outside the build folder")
                except (KeyError, TypeError, ValueError):
                    raise ShardError(f"{os.path.join(p, S.MANIFEST)}: malformed shard entry {sh!r}") from None
                entries.append(e)
                rows += e.rows
            builds.append(BuildInfo(p, rows, start, m))
            if not store.local:  # shards are fetched on first use; here one listing checks their sizes
                check_listed(store, entries[len(entries) - len(m["shards"]):])

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
                check_file(e, self.seq_len, self.dtype, verify)
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
        self._maps: dict[int, Mapped] = {}
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
        row's pieces begin in it (what ``Row`` reads).
        Longer than 60 lines: the vectorised gather of a batch, whose index arrays each step reuses.
        """
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

    def _mapped(self, k: int) -> Mapped:
        if self._fork != _forks:  # forked since: map afresh in this process
            self._fork, self._maps = _forks, {}
        m = self._maps.get(k)
        if m is None:
            m = self._maps[k] = self._map(k)
        return m

    def _map(self, k: int) -> Mapped:
        e = self._entries[k]
        # A local shard is mapped where it is; a remote one is fetched into the
        # cache and mapped there (under its lock: see packer/io/cache.py).
        with e.store.local_copy(e.rel, e.nbytes, e.checksum, self._cache, verify=self._verify) as path:
            return map_shard(e, path, self.seq_len, self._np_dtype)
