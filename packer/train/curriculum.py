"""Length curricula over ``packer repack --buckets`` output (dataset decomposition, Pouransari et al. 2024;
OLMo-core's variable sequence length).

``BucketDataset("outb/")`` reads every bucket (OUT/len-00256/, ...) through a ``PackedDataset`` each; its
keys are (length, row). ``BucketSampler`` is a batch sampler: each batch is rows of one bucket, holding
``tokens_per_batch`` tokens on every rank (``tokens_per_batch // length`` rows), in a schedule:

- ``"cyclic"``: the epoch's batches in ``cycles`` cycles, each going from the shortest bucket to the
  longest (the paper's Grow-P2 with cycles); each bucket's batches are spread evenly over the cycles, so
  each bucket is read in proportion to its tokens;
- ``"uniform"``: one random bucket per batch, weighted by the tokens it has left (a shuffle of the
  epoch's batches).

Each bucket's rows are shuffled per epoch (seed, epoch, length); a bucket's rows that fill no whole global
batch are left out of that epoch (``dropped_rows``). Every rank computes the same schedule, so at each step
all ranks read the same length (DDP), and takes its own rows of the step's global batch (disjoint). Rows
are single pieces of one document: no attention crosses documents, positions run 0..L-1.

    ds = BucketDataset("outb/")
    sampler = BucketSampler(ds, tokens_per_batch=65536, schedule="cyclic", seed=0, rank=r, world_size=w)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=packer.collate)   # (B, L) tensors
    ... sampler.state_dict(consumed=k) / BucketSampler(...).load_state_dict(state): the same next batches
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Iterator

import numpy as np

from ..errors import PackerError
from ..io import storage_for
from .dataset import PackedDataset
from .sampler import _rank_and_world

SCHEDULES = ("cyclic", "uniform")
BUCKETS_JSON = "buckets.json"


class BucketDataset:
    """The rows of every bucket of a ``--buckets`` repack (``holdout=True``: its holdout's); ``ds[(L, i)]``
    is row i of bucket L as ``PackedDataset`` gives it (``input_ids``, ``labels``, ``position_ids``)."""

    def __init__(self, path: str | os.PathLike, *, holdout: bool = False, **options):
        path = os.fspath(path)
        try:
            info = json.loads(storage_for(path).read(BUCKETS_JSON))
        except (OSError, ValueError) as e:
            raise PackerError(f"{path}: no finished bucket repack here (cannot read {BUCKETS_JSON}: {e}); "
                              "make one with packer repack IN OUT --buckets MIN:MAX") from None
        part = info.get("holdout") if holdout else info
        if part is None:
            raise PackerError(f"{path}: the repack has no holdout")
        root = path.rstrip("/") + ("/holdout" if holdout else "")
        self.info = info
        self.rows = {int(b["length"]): int(b["rows"]) for b in part["buckets"] if b["rows"]}
        self.parts = {L: PackedDataset(f"{root}/{b['path']}", **options)
                      for b in part["buckets"] if (L := int(b["length"])) in self.rows}

    @property
    def lengths(self) -> list[int]:
        """The bucket lengths that hold rows, shortest first."""
        return sorted(self.rows)

    def __len__(self) -> int:
        return sum(self.rows.values())

    def __getitem__(self, key):
        L, i = key
        return self.parts[int(L)][int(i)]

    def __getitems__(self, keys):
        """A batch of one bucket's rows, built at once (``packer.collate`` takes it as it is)."""
        lengths = {int(L) for L, _ in keys}
        if len(lengths) != 1:
            return [self[k] for k in keys]
        return self.parts[lengths.pop()].__getitems__([int(i) for _, i in keys])


class BucketSampler:
    """Batches of (length, row) keys, ``tokens_per_batch`` tokens each on every rank; see the module."""

    def __init__(self, source, tokens_per_batch: int, *, schedule: str = "cyclic", cycles: int = 8, seed: int = 0,
                 rank: int | None = None, world_size: int | None = None):
        rows = source.rows if isinstance(source, BucketDataset) else BucketDataset(source).rows
        if schedule not in SCHEDULES:
            raise PackerError(f"schedule must be one of {', '.join(SCHEDULES)} (got {schedule!r})")
        if not isinstance(cycles, int) or cycles < 1:
            raise PackerError(f"cycles must be a whole number >= 1 (got {cycles!r})")
        bad = [L for L in rows if tokens_per_batch < L or tokens_per_batch % L]
        if bad:
            raise PackerError(f"tokens_per_batch {tokens_per_batch:,} must be a multiple of every bucket length "
                              f"(not of {', '.join(map(str, bad))}): a batch holds whole rows")
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        self.rows, self.tokens_per_batch, self.schedule, self.cycles = dict(rows), int(tokens_per_batch), schedule, cycles
        self.seed, self.epoch = int(seed), 0
        self._resume, self._start, self._yielded = 0, None, 0

    def batch_rows(self, length: int) -> int:
        """Rows per batch (per rank) of bucket ``length``."""
        return self.tokens_per_batch // length

    def batches(self) -> dict[int, int]:
        """{length: global batches an epoch reads of it}."""
        return {L: n // (self.batch_rows(L) * self.world_size) for L, n in self.rows.items()}

    def dropped_rows(self) -> dict[int, int]:
        """{length: rows an epoch leaves out} (fewer than one global batch of each bucket)."""
        return {L: self.rows[L] - k * self.batch_rows(L) * self.world_size for L, k in self.batches().items()}

    def steps(self, epoch: int | None = None) -> np.ndarray:
        """The bucket length of each step of ``epoch`` (the same on every rank)."""
        epoch = self.epoch if epoch is None else epoch
        nb = self.batches()
        if self.schedule == "uniform":
            lengths = np.repeat(np.array(sorted(nb), np.int64), [nb[L] for L in sorted(nb)])
            return lengths[self._rng(epoch, 0).permutation(len(lengths))]
        out = []
        for c in range(self.cycles):  # batches c*n//cycles .. (c+1)*n//cycles of each bucket, short to long
            for L in sorted(nb):
                out.extend([L] * ((c + 1) * nb[L] // self.cycles - c * nb[L] // self.cycles))
        return np.array(out, np.int64)

    def _rng(self, epoch: int, length: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, int(epoch), int(length), zlib.crc32(self.schedule.encode())])

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch to iterate next, from its beginning."""
        if int(epoch) != self.epoch:
            self.epoch, self._resume, self._start, self._yielded = int(epoch), 0, None, 0

    def __len__(self) -> int:
        """Batches in a whole epoch (the same on every rank)."""
        return int(sum(self.batches().values()))

    def remaining(self) -> int:
        """Batches the next iteration yields (fewer than ``len`` after a mid-epoch resume)."""
        return max(len(self) - self._resume, 0)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        start, self._resume = self._resume, 0
        self._start, self._yielded = start, 0
        steps = self.steps()
        orders = {L: self._rng(self.epoch, L).permutation(self.rows[L]) for L in self.rows}
        seen = {L: int((steps[:start] == L).sum()) for L in self.rows}  # batches of each bucket before start
        for L in steps[start:].tolist():
            b = self.batch_rows(L)
            at = (seen[L] * self.world_size + self.rank) * b
            seen[L] += 1
            self._yielded += 1
            yield [(L, int(i)) for i in orders[L][at:at + b]]

    def state_dict(self, consumed: int | None = None) -> dict:
        """Where to resume. ``consumed``: batches this rank's loop consumed in this iteration (default:
        the batches handed out, exact without prefetch)."""
        if self._start is None:
            position = self._resume
        else:
            position = self._start + (self._yielded if consumed is None else int(consumed))
        return {"seed": self.seed, "epoch": self.epoch, "batch": position, "schedule": self.schedule,
                "cycles": self.cycles, "tokens_per_batch": self.tokens_per_batch, "world_size": self.world_size,
                "rows": {str(L): n for L, n in sorted(self.rows.items())}}

    def load_state_dict(self, state: dict) -> None:
        mine = self.state_dict()
        for k in ("seed", "schedule", "cycles", "tokens_per_batch", "world_size", "rows"):
            if state.get(k) != mine[k]:
                raise PackerError(f"cannot resume: the state's {k} is {state.get(k)!r}, this sampler's {mine[k]!r}")
        self.epoch, self._resume, self._start, self._yielded = int(state["epoch"]), int(state["batch"]), None, 0
