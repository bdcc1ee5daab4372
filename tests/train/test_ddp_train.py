"""Data-parallel training (issue 20): every rank's share under torchrun with gloo on CPU, and resharded resume.

The GPU runs (NCCL, 1-8 H200s) cannot happen in CI; this runs the same
script, bench/ddp_train.py, with ``torchrun --nproc-per-node 2`` (and 4) on
the gloo backend and a tiny model, and checks from what the ranks recorded
(each batch carries its row indices), against ``PackedSampler.epoch_order``:
the ranks together read the epoch's order, nothing twice; stopping on 4
ranks and resuming on 2 reads exactly the rows not yet read; every rank runs
the same number of steps (none is left waiting at an epoch's end).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from packer import BuildConfig, PackedDataset, PackedSampler, build

from tests.conftest import REPO, SAMPLE, load_script

SCRIPT = os.path.join(REPO, "bench", "ddp_train.py")
TINY = ["--device", "cpu", "--tiny", "--workers", "1"]


@pytest.fixture(scope="module")
def small_build(tmp_path_factory) -> str:
    """About a hundred rows of 128 bytes: a whole epoch on 2 ranks is a few dozen steps."""
    tmp = tmp_path_factory.mktemp("ddp")
    lines, n = [], 0
    with open(os.path.join(SAMPLE, "corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if isinstance(rec, dict) and isinstance(rec.get("text"), str):
                lines.append(line)
                n += len(line)
            if n > 24_000:
                break
    src = tmp / "small.jsonl"
    src.write_text("".join(lines), encoding="utf-8")
    out = str(tmp / "out")
    build(BuildConfig.of(inputs=(str(src),), out=out, seq_len=128, workers=1))
    return out


def torchrun(n: int, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", SCRIPT, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def step_rows(records: list, j: int) -> list[int]:
    """All rows the ranks read at step j."""
    return [x for rank in records for x in rank[j][1]]


def test_two_gloo_ranks_train_on_disjoint_shares_of_the_epoch_order(small_build, tmp_path):
    out = tmp_path / "run.json"
    p = torchrun(2, "train", "--data", small_build, *TINY, "--batch-size", "3", "--warmup", "2", "--window", "3",
                 "--rounds", "2", "--out", str(out))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["world"] == 2 and r["exact"] and r["problems"] == []
    assert r["steps_per_rank"] == [2 + 2 * 3] * 2
    order = PackedSampler(PackedDataset(small_build), seed=0).epoch_order().tolist()
    for j in range(8):  # step j of both ranks: the next 2 x 3 rows of the order, none twice
        rows = step_rows(r["records"], j)
        assert len(set(rows)) == 6 and sorted(rows) == sorted(order[6 * j:6 * j + 6])
    assert r["loss_finite"] and r["useful_tok_s"] > 0 and r["resident_tok_s"] > 0
    assert len(r["loader_vs_resident_per_rank"]) == 2 and len(r["wait_ms_per_step_per_rank"]) == 2


def test_stop_on_four_ranks_and_resume_on_two_reads_every_row_once(small_build, tmp_path):
    B, stop = 3, 3
    p = subprocess.run(
        [sys.executable, SCRIPT, "check", "--data", small_build, *TINY, "--batch-size", str(B), "--world", "4,2",
         "--stop", str(stop), "--into-next", "2", "--out-dir", str(tmp_path), "--timeout", "240"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    a = json.loads((tmp_path / "check_a.json").read_text())
    b = json.loads((tmp_path / "check_b.json").read_text())
    sampler = PackedSampler(PackedDataset(small_build), seed=0)
    order0, order1 = sampler.epoch_order(0).tolist(), sampler.epoch_order(1).tolist()
    M, pos = len(order0), stop * B * 4
    assert a["steps_per_rank"] == [stop] * 4
    left = (M - pos) // 2 // B
    assert b["steps_per_rank"] == [left + 2] * 2  # every rank: to the end of epoch 0, then 2 steps of epoch 1
    assert b["starts"] == {"0": pos}
    first = [x for rank in a["records"] for _, rows in rank for x in rows]
    assert sorted(first) == sorted(order0[:pos])
    rest = [x for rank in b["records"] for e, rows in rank if e == 0 for x in rows]
    assert sorted(step_rows(b["records"], 0)) == sorted(order0[pos:pos + 2 * B])  # resumes where the stop was
    read = first + rest
    assert len(set(read)) == len(read)  # nothing read twice
    assert sorted(read) == sorted(order0[:len(read)])  # the epoch's order, from its start
    assert 0 <= M - len(read) < 2 * B  # all of it but the last < world x batch rows
    nxt = [x for rank in b["records"] for e, rows in rank if e == 1 for x in rows]
    assert sorted(nxt) == sorted(order1[:2 * 2 * B])  # the next epoch starts at its beginning
    assert "exact" in p.stdout


def test_verify_reports_each_way_the_ranks_can_go_wrong():
    verify = load_script("bench/ddp_runs.py").verify
    order = {0: list(range(100, 120)), 1: list(range(200, 220))}  # 20 rows an epoch
    of = lambda e: __import__("numpy").array(order[e])  # noqa: E731
    W, B = 2, 2
    # 2 ranks x 2 rows: rank r reads positions r, r+2, ... of the epoch order from position 4
    good = [[(0, [order[0][4 + 4 * j + r], order[0][6 + 4 * j + r]]) for j in range(4)] + [(1, [order[1][r], order[1][2 + r]])]
            for r in range(W)]
    assert verify(good, of, {0: 4}, W, B) == []
    assert verify(good, of, {0: 0}, W, B)  # started elsewhere than claimed
    twice = [list(x) for x in good]
    twice[1][0] = (0, list(twice[0][0][1]))
    assert any("step 0" in p for p in verify(twice, of, {0: 4}, W, B))
    short = [good[0], good[1][:-1]]
    assert "different numbers of steps" in verify(short, of, {0: 4}, W, B)[0]
    early = [[s for s in rank if s[0] == 0][:3] + [(1, rank[-1][1])] for rank in good]  # epoch 0 left early
    assert any("ended after 3 steps" in p for p in verify(early, of, {0: 4}, W, B))
