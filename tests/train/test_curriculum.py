"""BucketSampler / BucketDataset (packer/train/curriculum.py) over a --buckets repack of sample_data."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from packer import BucketDataset, BucketSampler, collate, repack
from packer.errors import PackerError

TOKENS = 16384


@pytest.fixture(scope="module")
def ds(sample_build, tmp_path_factory) -> BucketDataset:
    out = str(tmp_path_factory.mktemp("curriculum") / "outb")
    repack(sample_build, out, buckets=(256, 8192), workers=1, quiet=True)
    return BucketDataset(out)


@pytest.mark.parametrize("schedule", ["cyclic", "uniform"])
def test_batches_hold_constant_tokens_and_every_row_once(ds, schedule):
    s = BucketSampler(ds, TOKENS, schedule=schedule, seed=3)
    batches = list(s)
    assert len(batches) == len(s) > 0
    seen = set()
    for b in batches:
        (L,) = {k[0] for k in b}
        assert len(b) * L == TOKENS
        seen.update(b)
    assert len(seen) == sum(len(b) for b in batches)  # no row twice
    assert {L: sum(1 for k in seen if k[0] == L) for L in ds.rows} == {
        L: ds.rows[L] - s.dropped_rows()[L] for L in ds.rows}
    assert [b[0][0] for b in batches] == s.steps().tolist()
    assert list(BucketSampler(ds, TOKENS, schedule=schedule, seed=3)) == batches  # deterministic
    s.set_epoch(1)
    assert list(s) != batches


def test_cyclic_goes_short_to_long_in_each_cycle(ds):
    steps = BucketSampler(ds, TOKENS, schedule="cyclic", cycles=4).steps().tolist()
    falls = sum(1 for a, b in zip(steps, steps[1:]) if b < a)
    assert falls == 3  # a new cycle starts short again: 4 ascending runs


@pytest.mark.parametrize("schedule", ["cyclic", "uniform"])
def test_resume_mid_epoch_gives_the_same_remaining_batches(ds, schedule):
    s = BucketSampler(ds, TOKENS, schedule=schedule, seed=7)
    s.set_epoch(2)
    whole = list(s)
    it = iter(s)
    for _ in range(11):
        next(it)
    state = s.state_dict()
    fresh = BucketSampler(ds, TOKENS, schedule=schedule, seed=7)
    fresh.load_state_dict(state)
    assert fresh.remaining() == len(whole) - 11
    assert list(fresh) == whole[11:]
    with pytest.raises(PackerError, match="cannot resume"):
        BucketSampler(ds, TOKENS, schedule=schedule, seed=8).load_state_dict(state)


def test_ranks_read_the_same_length_and_disjoint_rows(ds):
    ranks = [list(BucketSampler(ds, TOKENS, seed=1, rank=r, world_size=3)) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1
    for step in zip(*ranks):
        assert len({b[0][0] for b in step}) == 1
    keys = [set(k for b in r for k in b) for r in ranks]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])


def test_loader_rows_never_cross_documents(ds):
    s = BucketSampler(ds, TOKENS, schedule="uniform", seed=0)
    for k, batch in enumerate(DataLoader(ds, batch_sampler=s, collate_fn=collate)):
        B, L = batch["input_ids"].shape
        assert B * L == TOKENS
        assert (batch["position_ids"] == torch.arange(L)).all()  # one piece per row: positions 0..L-1
        assert (batch["labels"][:, 0] == -100).all() and (batch["labels"][:, 1:] == batch["input_ids"][:, 1:]).all()
        if k == 12:
            break


def test_refuses_a_batch_that_is_not_whole_rows(ds):
    with pytest.raises(PackerError, match="multiple"):
        BucketSampler(ds, 4096)
    with pytest.raises(PackerError, match="schedule"):
        BucketSampler(ds, TOKENS, schedule="grow")
