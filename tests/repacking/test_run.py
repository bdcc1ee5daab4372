"""Where repack units run (packer/repacking/run.py): processes, threads (a store that is not fork-safe)
and Ray give the same bytes."""

from __future__ import annotations

import pytest

from packer import repack
from packer.repacking import run

from .conftest import shard_bytes


def test_threads_give_the_bytes_of_processes(fresh, tmp_path, monkeypatch):
    procs_out, threads_out = str(tmp_path / "p"), str(tmp_path / "t")
    repack(fresh[1024], procs_out, seq_len=512, workers=2)
    monkeypatch.setattr(run.procs, "can_fork", lambda *a: False)  # as for an object store (its client's threads)
    repack(fresh[1024], threads_out, seq_len=512, workers=2)
    assert shard_bytes(procs_out) == shard_bytes(threads_out)


@pytest.mark.slow
def test_the_ray_engine_gives_the_same_bytes(fresh, tmp_path):
    pytest.importorskip("ray")
    out = str(tmp_path / "ray")
    res = repack(fresh[2048], out, seq_len=512, engine="ray", workers=2)
    assert res.units_run == 5
    assert shard_bytes(out) == shard_bytes(fresh[512])
    assert shard_bytes(out + "/holdout") == shard_bytes(fresh[512] + "/holdout")
