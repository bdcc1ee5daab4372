"""Epoch orders in blocks (packer/train/order.py), and PackedSampler's shuffle blocks over shards."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from packer import PackedDataset, PackedSampler
from packer.errors import PackerError
from packer.train.order import CHUNK, Sequential, ShardBlocks, order_for, positions


def _shards(seed: int, n_shards: int, most: int) -> np.ndarray:
    """Shard starts of a build of ``n_shards`` shards of 0..most rows (some empty, as a unit with no record start)."""
    rows = np.random.default_rng(seed).integers(0, most + 1, n_shards)
    return np.cumsum(rows) - rows, int(rows.sum())


class _Build:
    """What PackedSampler reads of a PackedDataset: its builds' rows and its shards' first rows."""

    def __init__(self, *builds):
        self.build_rows = tuple(n for _, n in builds)
        off = np.cumsum([0] + list(self.build_rows[:-1]))
        self.shard_starts = np.concatenate([s + o for (s, _), o in zip(builds, off)])


def _shard_of(starts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, rows, "right") - 1


@pytest.mark.parametrize("block_rows", [1, 50, 333, 5000])
def test_shard_blocks_are_a_permutation_whose_blocks_hold_whole_shards(block_rows):
    starts, n = _shards(0, 200, 40)
    order = ShardBlocks([7, 1], starts, n, block_rows)
    rows = np.concatenate([order.block(b) for b in range(len(order.bounds) - 1)])
    assert np.array_equal(np.sort(rows), np.arange(n))  # every row once
    shard = _shard_of(starts, rows)
    seen: set[int] = set()
    for b in range(len(order.bounds) - 1):
        mine = set(_shard_of(starts, order.block(b)).tolist())
        assert not mine & seen  # a shard lies in one block only
        seen |= mine
        size = order.bounds[b + 1] - order.bounds[b]
        assert size < block_rows + 40  # about block_rows rows: one shard at most past the stretch
    assert len(seen) == int((np.diff(np.append(starts, n)) > 0).sum())
    if block_rows == 5000:  # one block: all shards, rows shuffled across all of them
        assert len(order.bounds) == 2 and len(set(shard[:50].tolist())) > 20


def test_rows_are_shuffled_within_a_block_and_blocks_differ_by_key():
    starts, n = _shards(1, 300, 30)
    a, b = ShardBlocks([1], starts, n, 200), ShardBlocks([2], starts, n, 200)
    first = a.block(0)
    assert not np.array_equal(first, np.sort(first))  # shuffled, not shard by shard
    assert not np.array_equal(a.perm, b.perm) and a.digest() != b.digest()
    assert a.digest() == ShardBlocks([1], starts, n, 200).digest()  # a pure function of key and shards


@pytest.mark.parametrize("step,lo,hi", [(1, 0, None), (3, 1, None), (8, 5, 1000), (7, 1234, 4000)])
def test_positions_walk_the_order_one_block_at_a_time(step, lo, hi):
    starts, n = _shards(2, 400, 25)
    order = ShardBlocks([3], starts, n, 256)
    whole = np.concatenate([order.block(b) for b in range(len(order.bounds) - 1)])
    hi = n if hi is None else hi
    parts = list(positions(order, lo, hi, step))
    assert np.array_equal(np.concatenate(parts), whole[lo:hi:step])
    assert max(len(p) for p in parts) <= max(np.diff(order.bounds))  # never more than a block held


def test_sequential_and_small_builds_keep_the_order_of_before():
    assert np.array_equal(np.concatenate(list(positions(Sequential(CHUNK + 5), 0, CHUNK + 5))), np.arange(CHUNK + 5))
    starts, n = _shards(3, 50, 20)
    one = order_for([0, 1, 0], n, starts, n, True)  # n <= block_rows: one permutation
    assert np.array_equal(one.block(0), np.random.default_rng([0, 1, 0]).permutation(n))
    src = _Build((starts, n))
    assert np.array_equal(PackedSampler(src, seed=4).epoch_order(), PackedSampler(n, seed=4).epoch_order())


def test_sampler_reads_blocks_of_shards_and_every_row_once():
    (s1, n1), (s2, n2) = _shards(4, 120, 30), _shards(5, 80, 30)
    src = _Build((s1, n1), (s2, n2))
    s = PackedSampler(src, seed=2, block_rows=300)
    order = s.epoch_order()
    assert np.array_equal(np.sort(order), np.arange(n1 + n2))
    assert list(s) == order.tolist()
    shard = _shard_of(src.shard_starts, order)
    # 300 consecutive rows come from the shards of at most two blocks: few, against ~180 if uniform
    assert max(len(set(shard[i:i + 300].tolist())) for i in range(0, len(order) - 300, 97)) <= 2 * (300 // 15 + 3)
    assert len(set(shard[:300].tolist())) < len(set(PackedSampler(src, seed=2, block_rows=None).epoch_order()[:300] // 15))
    s.set_epoch(1)
    assert not np.array_equal(s.epoch_order(), order)


@pytest.mark.parametrize("world,stop", [(1, 77), (4, 150)])
def test_blocks_shard_over_ranks_and_resume_on_another_world_size(world, stop):
    starts, n = _shards(6, 150, 30)
    src = _Build((starts, n))
    order = PackedSampler(src, seed=8, block_rows=200).epoch_order()
    shares = [list(PackedSampler(src, seed=8, block_rows=200, rank=r, world_size=world)) for r in range(world)]
    assert sorted(itertools.chain(*shares)) == sorted(order[:len(order) - len(order) % world].tolist())
    s = PackedSampler(src, seed=8, block_rows=200, rank=0, world_size=world)
    it = iter(s)
    for _ in range(stop):
        next(it)
    state = s.state_dict()
    assert state["block_rows"] == 200
    rest = []
    for r in range(2):  # resumed on 2 ranks: the rows after the prefix all ranks had read
        t = PackedSampler(src, seed=8, block_rows=200, rank=r, world_size=2)
        t.load_state_dict(state)
        rest += list(t)
    assert sorted(rest) == sorted(order[stop * world:stop * world + (len(order) - stop * world) // 2 * 2].tolist())


def test_state_of_another_block_size_or_an_older_packer_is_refused():
    starts, n = _shards(7, 100, 30)
    src = _Build((starts, n))
    state = PackedSampler(src, seed=1, block_rows=100).state_dict()
    with pytest.raises(PackerError, match="block_rows"):
        PackedSampler(src, seed=1, block_rows=None).load_state_dict(state)
    old = PackedSampler(src, seed=1, block_rows=None).state_dict()
    del old["block_rows"]  # as saved before shuffle blocks: one permutation
    with pytest.raises(PackerError, match=r"block_rows=None\)"):
        PackedSampler(src, seed=1, block_rows=100).load_state_dict(old)
    PackedSampler(src, seed=1, block_rows=None).load_state_dict(old)  # resumes as it said
    with pytest.raises(PackerError, match="block_rows"):
        PackedSampler(src, block_rows=0)


def test_weighted_mixing_reads_each_build_through_its_blocks():
    (s1, n1), (s2, n2) = _shards(8, 60, 30), _shards(9, 40, 30)
    src = _Build((s1, n1), (s2, n2))
    s = PackedSampler(src, weights=[3, 1], num_samples=n1 + n2, seed=0, block_rows=150)
    order = s.epoch_order()
    first = order[order < n1]
    assert len(first) > n1 and np.array_equal(np.sort(first[:n1]), np.arange(n1))  # a pass is every row once
    shard = _shard_of(src.shard_starts, first)
    assert len(set(shard[:150].tolist())) <= 2 * (150 // 15 + 3)  # a build's rows come block by block
    assert list(s) == order.tolist()


def test_a_real_build_gives_its_shards_to_the_sampler(sample_build):
    ds = PackedDataset(sample_build)
    starts = ds.shard_starts
    assert starts.dtype == np.int64 and len(starts) == ds.num_shards and starts[0] == 0
    assert [int(ds._shards.locate(int(a))[1]) for a in starts] == [0] * len(starts)
    order = PackedSampler(ds, seed=0, block_rows=max(1, len(ds) // 4)).epoch_order()
    assert np.array_equal(np.sort(order), np.arange(len(ds)))
