"""examples/train_gpt.py runs on CPU from packer shards, learns, and resumes exactly."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

from tests.conftest import load_script

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "train_gpt.py")
TINY = ["--d-model", "32", "--layers", "2", "--heads", "2", "--batch-size", "4", "--lr", "3e-3", "--device", "cpu"]


def load_example():
    return load_script("examples/train_gpt.py")


def test_script_trains_on_cpu_with_the_dense_mask(sample_build):
    out = subprocess.run(
        [sys.executable, EXAMPLE, "--data", sample_build, "--steps", "12", "--log-every", "4", "--workers", "1", *TINY],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    losses = [float(x) for x in re.findall(r"step \d+ loss ([\d.]+) \(dense\)", out.stdout)]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < math.log(257) - 0.5  # well below a uniform guess over the byte vocabulary


def test_loss_falls_and_a_resumed_run_repeats_the_uninterrupted_one(sample_build, tmp_path):
    ex = load_example()
    base = ["--data", sample_build, "--log-every", "100", *TINY]
    full = ex.main(base + ["--steps", "10", "--workers", "2"])
    assert len(full) == 10 and full[-1] < full[0] - 0.5
    ckpt = str(tmp_path / "ck.pt")
    first = ex.main(base + ["--steps", "6", "--workers", "2", "--ckpt", ckpt, "--save-every", "6"])
    rest = ex.main(base + ["--steps", "10", "--workers", "2", "--ckpt", ckpt, "--resume"])
    assert first == full[:6]
    assert rest == full[6:]  # same rows, same order, same state: bit-identical on CPU
