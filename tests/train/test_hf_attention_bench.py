"""bench/hf_attention.py (the H200 benchmark of issue 16) runs its tiny CPU plan: every variant's
code path but the CUDA kernels, the correctness check within tolerance, the table, the JSON.
The CUDA-only variant must fail with packer's one-line reason, not crash the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("transformers")


def test_hf_attention_tiny_run(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(REPO, "bench", "hf_attention.py"), "--tiny", "--device", "cpu",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads((tmp_path / "hf_attention.json").read_text())
    ok = res["correctness"]["packer"]
    assert ok["max_abs_logit_diff"] < 0.05 and ok["grad_rel_diff"] < 0.02 and ok["segments"] >= 3
    for forced in ("packer_varlen",):
        assert "runs on CUDA only" in res["correctness"][forced]
    times = res["times"]
    for v in ("group", "group_fa2", "packer", "packer_cu", "packer_sorted", "packer_split", "hf_sdpa", "padded"):
        assert times[v][0] > 0, v
    assert "runs on CUDA only" in out.stdout  # packer_varlen, forced to a CUDA kernel on CPU
    assert "| packer_sorted |" in out.stdout
