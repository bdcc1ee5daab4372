"""Sampling: a deterministic, resumable, rank-sharded order over packed rows.

``PackedSampler`` decides which rows each rank reads in which order:

- **Epoch order.** A global order of the epoch's rows, a pure function of
  (seed, epoch) and the build sizes. Without weights every row comes once
  per epoch: over more than ``block_rows`` rows of a PackedDataset, shards in
  a shuffled order, a block of about ``block_rows`` rows of them at a time,
  rows shuffled within a block (packer/train/order.py: a reader reuses the
  block's shards; the order is made one block at a time, so a rank's memory
  does not grow with the build); else one uniform permutation (as with
  ``block_rows=None``); ``shuffle=False`` keeps row order.
- **Mixing.** With ``weights`` (one per build), an epoch has
  ``num_samples`` rows (default: all rows), build k contributing
  ``n_k ~ w_k * num_samples`` (largest remainder, so they sum exactly). Each
  build is read as an endless stream of fresh permutations of its rows
  (pass p shuffled by (seed, k, p), in its shard blocks); epoch e takes the stream's next
  ``n_k`` rows, so an upweighted build repeats rows, in a new order each
  pass, and a downweighted one is not repeated until all its rows were
  seen. The builds are interleaved by jittered stride: the j-th row of
  build k gets time (j + u) / w_k, u uniform in [0, 1) (seeded), and rows
  go out in time order. Every prefix of the epoch order then holds each
  build's share to within 1 + w_k * K rows (K builds), and the jitter keeps
  a periodic pattern from being aliased onto ranks.
- **Ranks.** Rank r of W reads positions ``start + r, start + r + W, ...``
  of the epoch order, ``(M - start) // W`` of them (M = epoch size): the
  shares are disjoint and equal, the last < W rows are dropped, and after j
  steps all ranks together have read exactly the prefix ``start + j*W``.
- **Resume.** ``state_dict()`` holds the epoch and that global position, so a
  trainer that stops mid-epoch resumes reading exactly the rows it would
  have read next, even with another world size. A digest of the epoch order
  is kept too: loading refuses a state whose order cannot be reproduced
  (other data, other seed or NumPy). ``len()`` is the whole epoch's share, resumed
  or not (torch's convention, on which Lightning counts: it adds the batches
  it restored to what the resumed iteration yields); ``remaining()`` is what
  the next iteration yields. ``set_epoch(n)`` wins over a state of an earlier
  epoch loaded after it (torchdata's StatefulDataLoader loads the sampler's
  state at ``iter()``, after the loop's ``set_epoch``): epoch n starts whole.

A DataLoader with workers prefetches: the sampler hands out more rows than
the loop has consumed. ``PackedLoader`` (a DataLoader) counts the batches the
loop received, as torchdata's StatefulDataLoader does, and both
``loader.state_dict()`` and ``sampler.state_dict()`` (during, or after, an
iteration the loader drives) give the state at that point. With a plain
DataLoader, the sampler cannot see the prefetch: pass
``consumed=rows_this_rank_consumed_this_epoch`` to ``state_dict``, or its
state counts the rows handed out (exact only with ``num_workers=0``).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import weakref

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler

from .batching import collate
from .order import Fixed, order_for, positions
from ..errors import PackerError

# Tags keep the random streams of different purposes apart (NumPy seeds from the whole list).
_PERMUTE, _STREAM, _MIX = 1, 2, 3

BLOCK_ROWS = 1 << 20  # rows of a shuffle block: about 64 shards of 64 MB at seq_len 2048 (uint16 ids)


class PackedSampler(DistributedSampler):
    """Indices of this rank's rows, epoch by epoch; see the module docstring.

    ``source``: a PackedDataset (its builds' row counts and its shards), a
    row count, or a sequence of per-build row counts (no shards known: one
    permutation). ``block_rows``: rows of a shuffle block (None: one uniform
    permutation of all rows, 8 bytes a row in every rank). ``rank``/``world_size``: default to
    torch.distributed's when a process group is initialized, else 0 and 1.

    A ``DistributedSampler`` by type only (its ``__init__`` is not used): so
    Lightning's ``use_distributed_sampler=True`` (the default) and other
    trainers that re-shard a loader whose sampler is not distributed leave
    this one, already sharded, alone.
    """

    def __init__(self, source, *, weights: Sequence[float] | None = None, num_samples: int | None = None,
                 shuffle: bool = True, seed: int = 0, rank: int | None = None, world_size: int | None = None,
                 block_rows: int | None = BLOCK_ROWS):
        rank, world_size = _rank_and_world(rank, world_size)
        # where shard starts come from, read when an epoch's order is made (a PackedDataset: its index)
        self._source = source if hasattr(source, "shard_starts") else None
        if hasattr(source, "build_rows"):
            sizes = list(source.build_rows)
        elif isinstance(source, (int, np.integer)):
            sizes = [int(source)]
        else:
            sizes = [int(s) for s in source]
        if not sizes or min(sizes) < 0:
            raise PackerError(f"PackedSampler needs row counts >= 0, got {sizes}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise PackerError(f"rank {rank} is not in 0..world_size-1 (world_size {world_size})")
        if block_rows is not None and block_rows < 1:
            raise PackerError(f"block_rows must be >= 1 or None, got {block_rows}")
        self.sizes, self.block_rows = tuple(sizes), block_rows
        self.offsets = tuple(int(x) for x in np.cumsum([0] + sizes[:-1]))
        self.seed, self.rank, self.world_size, self.shuffle = int(seed), int(rank), int(world_size), bool(shuffle)
        self.weights = None
        total = sum(sizes)
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (len(sizes),) or not np.all(np.isfinite(w)) or w.min() < 0 or w.sum() <= 0:
                raise PackerError(f"weights must be {len(sizes)} finite numbers >= 0 with a positive sum, got {list(weights)}")
            self.weights = tuple(float(x) for x in w / w.sum())
            for k, (wk, n) in enumerate(zip(self.weights, sizes)):
                if wk > 0 and n == 0:
                    raise PackerError(f"build {k} has weight {weights[k]} but no rows")
        elif num_samples is not None and num_samples != total:
            self.weights = tuple(n / total for n in sizes)  # sample by size, with replacement across epochs
        self.num_samples = int(total if num_samples is None else num_samples)
        if self.num_samples < 0:
            raise PackerError(f"num_samples must be >= 0, got {num_samples}")
        self.epoch = 0
        self._resume = 0  # global position where the next iteration starts
        self._iter_start: int | None = None  # where the current (or last) iteration started
        self._yielded = 0
        self._epoch_set: int | None = None  # the epoch the last set_epoch selected, until a state is loaded
        self._cache: tuple | None = None  # (epoch, its order (packer/train/order.py), its digest)
        # The PackedLoader about to iterate this sampler, then the one driving the current iteration
        # (weak references): its count of rows the loop received is the state's position.
        self._next_loader = self._loader = None

    # DistributedSampler's attribute names, for code that reads them
    num_replicas = property(lambda self: self.world_size)
    drop_last = True

    # -- the epoch order ------------------------------------------------------

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The global order of an epoch (all ranks): row indices, shape (num_samples,), made whole
        (8 bytes a row; iterating makes one block at a time)."""
        order = self._order(self.epoch if epoch is None else int(epoch))[0]
        return np.concatenate(list(positions(order, 0, order.n)) or [np.zeros(0, np.int64)])

    def _order(self, epoch: int) -> tuple:
        """(order, digest) of an epoch."""
        if self._cache is None or self._cache[0] != epoch:
            if self.weights is None:
                starts = None if self._source is None else self._source.shard_starts
                order = order_for([self.seed, _PERMUTE, epoch], self.num_samples, starts, self.block_rows, self.shuffle)
            else:
                order = Fixed(self._mixed(epoch))
            self._cache = (epoch, order, order.digest())
        return self._cache[1:]

    def _stream(self, k: int, a: int, b: int) -> np.ndarray:
        """Positions [a, b) of build k's endless stream of per-pass orders."""
        n, starts = self.sizes[k], self._build_starts(k)
        out = []
        for p in range(a // n, (b - 1) // n + 1):
            order = order_for([self.seed, _STREAM, k, p], n, starts, self.block_rows, self.shuffle)
            out.extend(positions(order, max(a - p * n, 0), min(b - p * n, n)))
        return np.concatenate(out) + self.offsets[k]

    def _build_starts(self, k: int) -> np.ndarray | None:
        """Build k's shard starts in its own row numbering (None: shards not known)."""
        if self._source is None:
            return None
        starts, o = self._source.shard_starts, self.offsets[k]
        return starts[(starts >= o) & (starts < o + self.sizes[k])] - o

    def __getstate__(self):
        # an order is remade, not shipped (32 bytes a shard); a loader is the process's own
        return {**self.__dict__, "_cache": None, "_next_loader": None, "_loader": None}

    def _mixed(self, epoch: int) -> np.ndarray:
        w = np.asarray(self.weights)
        quota = w * self.num_samples
        n = np.floor(quota).astype(np.int64)
        short = self.num_samples - int(n.sum())
        n[np.argsort(-(quota - n), kind="stable")[:short]] += 1  # largest remainder
        rng = np.random.default_rng([self.seed, _MIX, epoch])
        rows, times = [], []
        for k, nk in enumerate(n.tolist()):
            if nk == 0:
                continue
            rows.append(self._stream(k, epoch * nk, (epoch + 1) * nk))
            times.append((np.arange(nk) + rng.random(nk)) / w[k])
        if not rows:
            return np.zeros(0, dtype=np.int64)
        order = np.argsort(np.concatenate(times), kind="stable")
        return np.concatenate(rows)[order]

    # -- iteration ------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch to iterate next; a new epoch starts at its beginning. A state of an earlier
        epoch loaded after this call (torchdata loads the sampler's state at ``iter()``, after the
        loop's ``set_epoch``) does not take the epoch back."""
        self._epoch_set = int(epoch)
        if int(epoch) != self.epoch:
            self.epoch, self._resume, self._iter_start, self._yielded, self._loader = int(epoch), 0, None, 0, None

    def _share(self, start: int) -> int:
        return max(self.num_samples - start, 0) // self.world_size

    def __len__(self) -> int:
        """Rows this rank reads in a whole epoch, resumed or not: torch's convention, on which trainers
        count steps (Lightning adds the batches it restored to what the resumed iteration yields)."""
        return self._share(0)

    def remaining(self) -> int:
        """Rows this rank reads in the next iteration (fewer than ``len`` after a mid-epoch resume)."""
        return self._share(self._resume)

    def __iter__(self) -> Iterator[int]:
        start, self._resume = self._resume, 0  # a resumed position applies to one iteration
        order = self._order(self.epoch)[0]
        self._iter_start, self._yielded = start, 0
        self._loader, self._next_loader = self._next_loader, None  # a PackedLoader drives this iteration, or none
        for mine in positions(order, start + self.rank, start + self._share(start) * self.world_size, self.world_size):
            for i in mine.tolist():
                self._yielded += 1
                yield i

    # -- checkpointing --------------------------------------------------------

    def state_dict(self, consumed: int | None = None) -> dict:
        """Where to resume. ``consumed``: rows this rank's loop consumed in this iteration (default: the
        rows its PackedLoader's loop received, if one drives the iteration; else the rows the sampler
        handed out, exact without prefetch)."""
        loader = self._loader() if self._loader is not None else None
        if consumed is None and loader is not None and loader._received is not None:
            consumed = loader._received
        if self._iter_start is None:
            position = self._resume
        else:
            n = self._yielded if consumed is None else int(consumed)
            position = self._iter_start + n * self.world_size
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "position": position,
            "num_samples": self.num_samples,
            "block_rows": self.block_rows,
            "order_digest": self._order(self.epoch)[1],
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("seed") != self.seed or state.get("num_samples") != self.num_samples:
            raise PackerError(
                f"cannot resume: state is for seed {state.get('seed')} and {state.get('num_samples')} rows per epoch, "
                f"this sampler has seed {self.seed} and {self.num_samples}"
            )
        chosen, self._epoch_set = self._epoch_set, None
        self.epoch, self._iter_start, self._yielded, self._loader = int(state["epoch"]), None, 0, None
        self._resume = int(state["position"])
        digest = self._order(self.epoch)[1]
        if chosen is not None and chosen > self.epoch:  # set_epoch chose a later epoch: it starts whole
            self.epoch, self._resume = chosen, 0
        if state.get("order_digest") != digest:
            older = "" if "block_rows" in state else (
                "; a state saved by a packer before shuffle blocks resumes with PackedSampler(..., block_rows=None)")
            raise PackerError(
                "cannot resume: this epoch's row order differs from the saved one "
                f"(other builds, weights, shuffle or block_rows, or another NumPy){older}"
            )


def _rank_and_world(rank, world_size) -> tuple[int, int]:
    if rank is not None and world_size is not None:
        return rank, world_size
    dist = torch.distributed
    on = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if on else 1
    if rank is None:
        rank = dist.get_rank() if on else 0
    return rank, world_size


class PackedLoader(DataLoader):
    """A DataLoader over a PackedDataset whose ``state_dict`` is exact.

    It counts the rows the loop has received (not what workers prefetched)
    and asks its ``PackedSampler`` for the state at that point; the sampler's
    own ``state_dict()`` asks the loader the same. Defaults:
    ``collate_fn=packer.collate``; any other DataLoader argument passes through.
    """

    def __init__(self, dataset, batch_size: int = 1, *, sampler: PackedSampler, collate_fn=collate, **kwargs):
        if not isinstance(sampler, PackedSampler):
            raise PackerError("PackedLoader needs a PackedSampler")
        super().__init__(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collate_fn, **kwargs)
        self._received: int | None = None

    def __iter__(self):
        self._received = 0
        self.sampler._next_loader = weakref.ref(self)  # the iteration below counts what the loop received
        share = self.sampler.remaining()
        for batch in super().__iter__():
            self._received = min(self._received + self.batch_size, share)
            yield batch

    def state_dict(self) -> dict:
        return self.sampler.state_dict(consumed=self._received)

    def load_state_dict(self, state: dict) -> None:
        self._received = None
        self.sampler.load_state_dict(state)
