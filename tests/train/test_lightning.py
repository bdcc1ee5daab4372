"""Lightning with its defaults on packer's loader: single device and DDP (2 CPU processes,
gloo). Each rank reads a disjoint, equal, in-order share of the epoch order, and a run resumed
from a mid-epoch checkpoint reads exactly the rows, and ends at the weights, of the full run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from packer import PackedDataset, PackedSampler

pytest.importorskip("lightning")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lightning_run.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(SCRIPT)))


def run(build, out, devices, steps, ckpt=None):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, SCRIPT, build, str(out), str(devices), str(steps)] + ([ckpt] if ckpt else [])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(devices)]


@pytest.mark.parametrize("devices", [2])  # single-device resume: tests/train/test_sampler.py and the docs recipe
def test_lightning_defaults_shard_in_order_and_resume_exactly(short_docs_build, tmp_path, devices):
    ds = PackedDataset(short_docs_build)
    steps, B = 6, 2
    full = run(short_docs_build, tmp_path / "full", devices, steps)
    order = PackedSampler(ds, seed=0).epoch_order()
    for r, res in enumerate(full):
        assert res["world"] == devices and len(res["seen"]) == steps
        mine = order[r::devices]  # rank r: positions r, r + W, ... of the one global order
        for j, got in enumerate(res["seen"]):
            assert torch.equal(got, ds.batch(mine[j * B:(j + 1) * B])["input_ids"])
    if devices == 2:  # disjoint shares: no row trained on by both ranks
        a = {tuple(x.tolist()) for b in full[0]["seen"] for x in b}
        b = {tuple(x.tolist()) for b in full[1]["seen"] for x in b}
        assert len(a) == steps * B and not a & b

    ckpt = str(tmp_path / "full" / "ckpt" / "step=2.ckpt")
    assert os.path.exists(ckpt)
    resumed = run(short_docs_build, tmp_path / "resumed", devices, steps, ckpt)
    for f, res in zip(full, resumed):
        assert len(res["seen"]) == steps - 2
        for got, want in zip(res["seen"], f["seen"][2:]):
            assert torch.equal(got, want)
    for k, v in full[0]["state"].items():
        torch.testing.assert_close(resumed[0]["state"][k], v, rtol=0, atol=0, msg=k)


def test_packed_sampler_is_a_distributed_sampler_that_lightning_leaves_alone():
    """Lightning replaces a loader's sampler unless it is a DistributedSampler; PackedSampler is one by
    type, takes rank/world_size from torch.distributed (0 and 1 with no process group)."""
    from torch.utils.data import DistributedSampler

    s = PackedSampler(10, seed=3)
    assert isinstance(s, DistributedSampler)
    assert (s.rank, s.world_size, s.num_replicas) == (0, 1, 1)
    assert sorted(s) == list(range(10))
    t = PackedSampler(10, seed=3, rank=1, world_size=2)
    assert list(t) == s.epoch_order()[1::2].tolist()
