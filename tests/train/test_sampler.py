"""PackedSampler and PackedLoader: shuffle, ranks, resume, mixing."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from packer import PackedDataset, PackedLoader, PackedSampler, collate
from packer.errors import PackerError


def test_shuffle_is_a_deterministic_permutation_that_changes_by_epoch():
    s = PackedSampler([700, 300, 11], seed=3)
    e0 = list(s)
    assert sorted(e0) == list(range(1011))
    assert e0 == list(PackedSampler([700, 300, 11], seed=3))  # deterministic
    assert e0 != list(range(1011))
    s.set_epoch(1)
    e1 = list(s)
    assert sorted(e1) == list(range(1011)) and e1 != e0
    s.set_epoch(0)
    assert list(s) == e0  # an epoch's order depends on (seed, epoch) only
    assert list(PackedSampler(1011, seed=4)) != e0
    assert list(PackedSampler(1011, shuffle=False)) == list(range(1011))


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_ranks_are_disjoint_equal_and_cover(world):
    n = 1011
    shares = [list(PackedSampler(n, seed=1, rank=r, world_size=world)) for r in range(world)]
    assert len({len(x) for x in shares}) == 1 and len(shares[0]) == n // world
    flat = list(itertools.chain(*shares))
    assert len(set(flat)) == len(flat)  # disjoint
    assert len(flat) == n - n % world  # all rows but fewer than world_size
    # step j of all ranks together is the slice [j*W, (j+1)*W) of the epoch order
    order = PackedSampler(n, seed=1).epoch_order()
    for j in range(len(shares[0])):
        assert sorted(s[j] for s in shares) == sorted(order[j * world:(j + 1) * world])


@pytest.mark.parametrize("world,stop", [(1, 0), (1, 37), (4, 100), (4, 252)])
def test_resumed_sampler_yields_exactly_the_rest(world, stop):
    n = 1011
    for r in range(world):
        full = list(PackedSampler(n, seed=5, rank=r, world_size=world))
        s = PackedSampler(n, seed=5, rank=r, world_size=world)
        it = iter(s)
        seen = [next(it) for _ in range(stop)]
        state = s.state_dict()
        fresh = PackedSampler(n, seed=5, rank=r, world_size=world)
        fresh.load_state_dict(state)
        assert fresh.remaining() == len(full) - stop and len(fresh) == len(full)  # len: the whole epoch (torch)
        assert seen + list(fresh) == full
        assert list(fresh) == full  # the resumed position applies to one pass only


def test_resume_with_another_world_size_reads_the_unread_rows():
    n, W1, W2, steps = 1000, 4, 3, 50
    samplers = [PackedSampler(n, seed=2, rank=r, world_size=W1) for r in range(W1)]
    its = [iter(s) for s in samplers]
    read = {next(it) for it in its for _ in range(steps)}
    state = samplers[0].state_dict()
    assert all(s.state_dict() == state for s in samplers)
    rest = []
    for r in range(W2):
        s = PackedSampler(n, seed=2, rank=r, world_size=W2)
        s.load_state_dict(state)
        rest += list(s)
    assert not read & set(rest)
    assert len(read) + len(rest) == n - (n - W1 * steps) % W2


def test_state_from_another_order_is_refused():
    s = PackedSampler(1000, seed=1)
    state = s.state_dict()
    with pytest.raises(PackerError, match="seed"):
        PackedSampler(1000, seed=2).load_state_dict(state)
    other = PackedSampler([500, 500], seed=1, weights=[0.9, 0.1])
    with pytest.raises(PackerError, match="row order differs"):
        other.load_state_dict(state)


def test_mixing_follows_the_weights_in_every_prefix():
    sizes, w = [1000, 120, 7], [0.5, 0.3, 0.2]
    M = 6000
    s = PackedSampler(sizes, weights=w, num_samples=M, seed=0)
    order = s.epoch_order()
    assert len(order) == M
    build = np.searchsorted(np.cumsum(sizes), order, side="right")
    counts = np.stack([np.cumsum(build == k) for k in range(3)], 1)  # (M, K): rows of each build in every prefix
    expected = np.arange(1, M + 1)[:, None] * np.array(w)[None, :]
    K = len(sizes)
    tol = 1 + np.array(w) * K  # the bound stated in packer/train/sampler.py
    assert np.all(np.abs(counts - expected) <= tol[None, :] + 1e-9)
    assert counts[-1].tolist() == [3000, 1800, 1200]
    # each build's stream is whole passes of permutations: build 1 (120 rows, 1800 reads) = 15 passes
    b1 = order[build == 1] - 1000
    for p in range(15):
        assert sorted(b1[p * 120:(p + 1) * 120]) == list(range(120))
    assert len({tuple(b1[p * 120:(p + 1) * 120]) for p in range(15)}) == 15  # a fresh order each pass
    assert np.array_equal(order, PackedSampler(sizes, weights=w, num_samples=M, seed=0).epoch_order())


def test_a_downweighted_build_is_read_through_before_repeating():
    s = PackedSampler([1000, 100], weights=[0.1, 0.9], num_samples=1000, seed=0)
    seen = []
    for e in range(10):  # build 0 gets 100 rows per epoch: all 1000 in 10 epochs
        s.set_epoch(e)
        o = s.epoch_order()
        seen += o[o < 1000].tolist()
    assert sorted(seen) == list(range(1000))


def test_mixing_spreads_builds_over_ranks():
    # A fixed stride would put all of A on rank 0 and all of B on rank 1; the jitter mixes.
    shares = [np.array(list(PackedSampler([500, 500], weights=[1, 1], seed=0, rank=r, world_size=2))) for r in range(2)]
    for x in shares:
        assert 0.4 < np.mean(x < 500) < 0.6


def test_bad_arguments():
    with pytest.raises(PackerError):
        PackedSampler([10, 10], weights=[1.0])
    with pytest.raises(PackerError):
        PackedSampler([10, 0], weights=[1.0, 1.0])
    with pytest.raises(PackerError):
        PackedSampler(10, rank=2, world_size=2)


@pytest.mark.parametrize("workers,blocks", [(0, False), (2, False), (2, True)])
def test_loader_resume_sees_exactly_the_batches_it_would_have_seen(sample_build, workers, blocks):
    ds = PackedDataset(sample_build)
    B, stop = 8, 9
    opts = {"seed": 7, "rank": 1, "world_size": 2, **({"block_rows": len(ds) // 5} if blocks else {})}  # shuffle blocks

    def run(loader, n):
        return [b["input_ids"].clone() for _, b in zip(range(n), loader)]

    full = run(PackedLoader(ds, B, sampler=PackedSampler(ds, **opts)), 20)
    assert (type(PackedSampler(ds, **opts)._order(0)[0]).__name__ == "ShardBlocks") == blocks and ds.num_shards > 2
    loader = PackedLoader(ds, B, sampler=PackedSampler(ds, **opts), num_workers=workers)
    first = run(loader, stop)  # workers have prefetched beyond this point
    state = loader.state_dict()
    assert state["position"] == stop * B * 2
    resumed = PackedLoader(ds, B, sampler=PackedSampler(ds, **opts), num_workers=workers)
    resumed.load_state_dict(state)
    rest = run(resumed, 20 - stop)
    assert len(first + rest) == len(full)
    for a, b in zip(first + rest, full):
        assert torch.equal(a, b)


def test_the_samplers_own_state_during_a_prefetching_loader_is_the_loops_position(sample_build):
    """issue 55.6: sampler.state_dict() taken while a PackedLoader with 2 workers runs counted the rows
    handed to the prefetching workers (50 where the loop had 42); it is the loop's position now, and a
    resume from it gives exactly the remaining batches."""
    ds = PackedDataset(sample_build)
    B, k = 64, 3  # (343 batches: at 4 rows, 5,485 batches through two workers' pipes took 20 s on two cores)
    opts = {"seed": 3, "block_rows": None}

    def rows(loader, n=None):
        return [b["input_ids"].clone() for _, b in zip(range(n if n is not None else 10**9), loader)]

    full = rows(PackedLoader(ds, B, sampler=PackedSampler(ds, **opts)))
    sampler = PackedSampler(ds, **opts)
    loader = PackedLoader(ds, B, sampler=sampler, num_workers=2)
    first = rows(loader, k)
    assert sampler._yielded > k * B  # the workers were handed more than the loop consumed
    state = sampler.state_dict()
    assert state == loader.state_dict() and state["position"] == k * B
    resumed_sampler = PackedSampler(ds, **opts)
    resumed_sampler.load_state_dict(state)
    rest = rows(PackedLoader(ds, B, sampler=resumed_sampler, num_workers=2))
    assert len(first) + len(rest) == len(full)
    for a, b in zip(first + rest, full):
        assert torch.equal(a, b)


def test_loader_with_weights_over_two_builds(sample_build, copy_build):
    other = copy_build(sample_build)
    ds = PackedDataset([sample_build, other])
    n = ds.build_rows[0]
    s = PackedSampler(ds, weights=[3, 1], num_samples=400, seed=0)
    batches = list(PackedLoader(ds, 10, sampler=s))
    assert len(batches) == 40 and all(b["input_ids"].shape == (10, ds.seq_len) for b in batches)
    order = s.epoch_order()
    assert np.sum(order >= n) == 100  # build 1's share: 1/4 of 400
    want = torch.stack([ds[int(i)]["input_ids"] for i in order[:10]])
    assert torch.equal(batches[0]["input_ids"], want)


class Index(Dataset):
    """Row i is just i: what each rank read, without reading shards."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return int(i)


def take_rows(batch):
    return list(batch)


def test_prefetching_loaders_stop_on_eight_ranks_and_resume_on_four_with_the_unread_rows():
    n, B, stop = 203, 2, 5
    ranks = [PackedLoader(Index(n), B, sampler=PackedSampler(n, seed=9, rank=r, world_size=8), num_workers=1,
                          collate_fn=take_rows, drop_last=True) for r in range(8)]
    first = []
    for lo in ranks:
        it = iter(lo)
        first += [x for _ in range(stop) for x in next(it)]  # the worker has prefetched further
    states = [lo.state_dict() for lo in ranks]
    assert all(s == states[0] for s in states) and states[0]["position"] == stop * B * 8
    rest, steps = [], set()
    for r in range(4):
        lo = PackedLoader(Index(n), B, sampler=PackedSampler(n, seed=9, rank=r, world_size=4), num_workers=1,
                          collate_fn=take_rows, drop_last=True)
        lo.load_state_dict(states[0])
        batches = list(lo)
        steps.add(len(batches))
        rest += [x for b in batches for x in b]
    order = PackedSampler(n, seed=9).epoch_order().tolist()
    assert len(steps) == 1  # every rank the same number of steps
    read = first + rest
    assert len(set(read)) == len(read) and sorted(read) == sorted(order[:len(read)])
    assert 0 <= n - len(read) < 4 * B


def _train(ds, make_loader, epochs, stop=None, state=None):
    """A tiny model trained over ``epochs`` epochs of a loader (``set_epoch`` before each).
    ``stop`` (epoch, step): return there, with the loader's, model's and optimizer's state (step None:
    once the epoch's loop has ended). ``state``: resume from such a return. Gives (rows read, weights, state at stop)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(ds.vocab_size, 8), torch.nn.Linear(8, ds.vocab_size))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sampler = PackedSampler(ds, seed=0)
    loader = make_loader(sampler)
    first = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        loader.load_state_dict(state["loader"])
        first = state["epoch"]
    rows = []
    for epoch in range(first, epochs):
        sampler.set_epoch(epoch)
        for step, batch in enumerate(loader):
            rows.append(batch["input_ids"].clone())
            logits = model(batch["input_ids"])
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, ds.vocab_size),
                                                     batch["labels"][:, 1:].reshape(-1), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if stop == (epoch, step):
                return rows, model.state_dict(), _saved(model, opt, loader, epoch)
        if stop == (epoch, None):
            return rows, model.state_dict(), _saved(model, opt, loader, epoch + 1)
    return rows, model.state_dict(), None


def _saved(model, opt, loader, epoch):
    return {"model": copy.deepcopy(model.state_dict()), "opt": copy.deepcopy(opt.state_dict()),
            "loader": copy.deepcopy(loader.state_dict()), "epoch": epoch}


def in_full_sweep(item) -> bool:
    """(tests/conftest.py marks these ``full``: issue 54.) The PackedLoader control of
    test_stateful_dataloader_resumes_exactly runs two of its four cases in the default run (mid-epoch with 0
    workers, an epoch's end with 2); torchdata's loader, whose bug it was, runs all four."""
    p = getattr(getattr(item, "callspec", None), "params", {})
    return p.get("kind") == "packed" and (p["where"], p["workers"]) in (("mid_epoch", 2), ("epoch_end", 0))


@pytest.mark.parametrize("kind", ["stateful", "packed"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("where", ["mid_epoch", "epoch_end"])
def test_stateful_dataloader_resumes_exactly(short_docs_build, kind, workers, where):
    """issue 42.2: torchdata's StatefulDataLoader loads the sampler's state at ``iter()``, after the loop's
    ``set_epoch``; a state taken at an epoch's end then took epoch 1 back to epoch 0 (an empty epoch with
    0 workers, epoch 0 again with 2). Mid-epoch and at the end, the resumed run reads the uninterrupted
    run's rows in its order, epoch 1 whole, and ends at its weights. PackedLoader is the control."""
    ds = PackedDataset(short_docs_build)
    B = 8
    if kind == "stateful":
        loader_of = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    else:
        loader_of = PackedLoader
    kw = {"collate_fn": collate} if kind == "stateful" else {}

    def make(sampler):
        return loader_of(ds, batch_size=B, sampler=sampler, num_workers=workers, **kw)

    steps = len(ds) // B
    whole, w_whole, _ = _train(ds, make, 2)
    assert len(whole) == 2 * steps
    at = (0, 4) if where == "mid_epoch" else (0, None)  # None: the state taken after epoch 0's loop
    before, _, state = _train(ds, make, 2, stop=at)
    after, w_after, _ = _train(ds, make, 2, state=state)
    got = before + after
    assert len(got) == len(whole)
    for a, b in zip(got, whole):
        assert torch.equal(a, b)
    for k, v in w_whole.items():
        torch.testing.assert_close(w_after[k], v, rtol=0, atol=0, msg=k)
