"""bench/curriculum_gpu.py without a GPU: it skips cleanly; its plan and table (the CPU parts) are right."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import REPO, load_script


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA path")
def test_skips_without_cuda():
    out = subprocess.run([sys.executable, os.path.join(REPO, "bench", "curriculum_gpu.py"), "--build", "x", "--buckets", "y",
                          "--steps", "4"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0 and "skipped" in out.stdout, out.stderr[-2000:]


def test_plan_and_table():
    bench = load_script("bench/curriculum_gpu.py")
    a = SimpleNamespace(tokens_per_batch=65536, steps=10, warmup=3)
    p = bench.plan(a, 8192, [256, 8192])
    assert p == {"budget_slots": 655360, "fixed_rows": 8, "bucket_rows": {256: 256, 8192: 8}}
    with pytest.raises(SystemExit):
        bench.plan(SimpleNamespace(tokens_per_batch=4096, steps=10, warmup=3), 8192, [256])
    lines = bench.table({"fixed": {"tokens_per_s": 1e5, "padding_pct": 1.5, "steps": 10, "eval_loss": 3.2}})
    assert "fixed" in lines[1] and "100,000" in lines[1]
