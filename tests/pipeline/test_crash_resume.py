"""Crashes, Ctrl-C, dead workers and full disks: nothing corrupt, resume is exact."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests._cli import error_lines
from tests._services import folder_files
from tests.conftest import packer_cli as packer

ARGS = ["--seq-len", "256", "--unit-mb", "0.05", "--workers", "2", "-q"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash") / "in"
    root.mkdir()
    rng = random.Random(11)
    words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split()
    for i in range(16):
        with open(root / f"{i}.jsonl", "w") as f:
            for _ in range(400):
                n = int(rng.lognormvariate(4, 1.2)) + 1
                f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(n))}) + "\n")
    return str(root)


@pytest.fixture(scope="module")
def clean(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("clean") / "out")
    r = packer("build", corpus, out, *ARGS)
    assert r.returncode == 0, r.stderr
    return out


def start(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "packer.cli", *args], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def assert_same_build(out, clean):
    a, b = folder_files(out), folder_files(clean)
    assert sorted(a) == sorted(b), set(a) ^ set(b)
    for k in a:
        assert a[k] == b[k], k
    r = packer("stats", out)
    assert r.returncode == 0, r.stderr


def assert_resume_gives_the_clean_build(corpus, out, clean):
    r = packer("build", corpus, out, *ARGS, "--resume")
    assert r.returncode == 0, r.stderr
    assert_same_build(out, clean)


def assert_failed_in_one_line(r, out, *phrases):
    """One line on stderr naming what happened (``phrases``), no traceback, no manifest."""
    for phrase in phrases:
        assert phrase in r.stderr
    assert len(error_lines(r.stderr)) == 1 and "Traceback" not in r.stderr
    assert not os.path.exists(os.path.join(out, "manifest.json"))


@pytest.mark.parametrize("where", ["read", "tokenize", "pack", "write", "rename", "manifest"])
def test_crash_at_each_stage_then_resume(tmp_path, corpus, clean, where):
    """SIGKILL of the whole process group at a named point (in unit 3 for unit stages)."""
    out = str(tmp_path / "out")
    env = {"PACKER_FAULT": where} if where == "manifest" else {"PACKER_FAULT": where, "PACKER_FAULT_UNIT": "3"}
    r = packer("build", corpus, out, *ARGS, env=env)
    assert r.returncode == -signal.SIGKILL
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert_resume_gives_the_clean_build(corpus, out, clean)


def test_ten_random_kills_then_resume(tmp_path, corpus, clean):
    """Kill the build at 10 random moments, resuming each time; the result equals a clean build.

    Half the moments are random times; the other half a random stage of a random
    unfinished unit (so the kill always lands, however fast the machine)."""
    out = str(tmp_path / "out")
    n_units = len(json.load(open(os.path.join(clean, "manifest.json")))["shards"])
    rng = random.Random(5)
    kills = 0
    for i in range(40):
        resume = ["--resume"] if os.path.exists(os.path.join(out, "build.json")) else []
        units = os.path.join(out, "units")
        done = {int(n[:6]) for n in os.listdir(units) if n.endswith(".json") and not n.startswith(".")} if os.path.isdir(units) else set()
        left = [u for u in range(n_units) if u not in done]
        if i % 2 and left:
            env = {"PACKER_FAULT": rng.choice(["read", "tokenize", "pack", "write", "rename"]),
                   "PACKER_FAULT_UNIT": str(rng.choice(left))}
            p = start("build", corpus, out, *ARGS, *resume, env=env)
            p.wait()
            kills += p.returncode == -signal.SIGKILL
        else:
            p = start("build", corpus, out, *ARGS, *resume)
            time.sleep(rng.uniform(0.05, 1.0))
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                kills += 1
            p.wait()
        if kills == 10:
            break
        if os.path.exists(os.path.join(out, "manifest.json")):
            shutil.rmtree(out)  # it finished between kills: start over, so every kill lands mid-build
    assert kills == 10
    assert_resume_gives_the_clean_build(corpus, out, clean)


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path, corpus, clean):
    out = str(tmp_path / "out")
    p = start("build", corpus, out, *ARGS[:-1], env={"PACKER_FAULT": "slow"})  # no fault named slow: a normal build
    units = os.path.join(out, "units")
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.isdir(units) and len(os.listdir(units)) >= 1):
        time.sleep(0.01)
    written = len(os.listdir(units))
    os.killpg(p.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
    _, err = p.communicate(timeout=180)  # (a hang guard, not a speed bound: the build's own bound is below)
    if p.returncode == 0:
        pytest.skip("build finished before Ctrl-C arrived")
    assert p.returncode == 130, err
    # Bounded by what the build does, not by the clock: after Ctrl-C the workers are killed and no new task
    # starts, so at most the unit each worker was writing at that moment is written since.
    workers = int(ARGS[ARGS.index("--workers") + 1])
    assert len(os.listdir(units)) <= written + workers, (written, os.listdir(units))
    assert "Traceback" not in err
    assert "--resume" in err
    assert_resume_gives_the_clean_build(corpus, out, clean)


def test_killed_worker_is_detected(tmp_path, corpus, clean):
    out = str(tmp_path / "out")
    r = packer("build", corpus, out, *ARGS, env={"PACKER_FAULT": "kill-worker", "PACKER_FAULT_UNIT": "2"})
    assert r.returncode != 0
    assert_failed_in_one_line(r, out, "worker process died", "--resume")
    assert_resume_gives_the_clean_build(corpus, out, clean)


def test_write_error_is_one_line_and_resumable(tmp_path, corpus, clean):
    out = str(tmp_path / "out")
    r = packer("build", corpus, out, *ARGS, env={"PACKER_FAULT": "enospc", "PACKER_FAULT_UNIT": "4"})
    assert r.returncode == 2
    assert_failed_in_one_line(r, out, "No space left on device", "--resume")
    # Temp files of units still in flight may remain: named .tmp-*, they never look
    # like a shard, and --resume removes them (assert_same_build checks the file set).
    assert_resume_gives_the_clean_build(corpus, out, clean)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield str(mnt)
    subprocess.run(["umount", "-l", str(mnt)])


def test_real_disk_full_then_resume_after_space_is_freed(tmp_path, corpus, clean, tiny_tmpfs):
    out = os.path.join(tiny_tmpfs, "out")
    ballast = os.path.join(tiny_tmpfs, "ballast")
    r = packer("build", corpus, out, *ARGS)
    assert r.returncode == 2, r.stderr
    assert "No space left on device" in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    # What is there verifies: every finished unit's shard matches its record.
    for name in os.listdir(os.path.join(out, "units")):
        rec = json.load(open(os.path.join(out, "units", name)))
        assert os.path.getsize(os.path.join(out, rec["path"])) == rec["bytes"]
    # Free space: move the partial build to a roomy disk and resume there.
    roomy = str(tmp_path / "roomy")
    subprocess.run(["cp", "-a", out, roomy], check=True)
    assert not os.path.exists(ballast)
    assert_resume_gives_the_clean_build(corpus, roomy, clean)


def test_a_stalled_build_fails_instead_of_hanging(tmp_path, corpus, monkeypatch):
    """If no work is in flight and the reader has stopped, the build says so instead of waiting forever."""
    import importlib

    from packer.errors import PackerError

    from packer import BuildConfig, build
    B = importlib.import_module("packer.pipeline.engines.local")

    monkeypatch.setattr(B, "read_units", lambda *a, **k: None)  # a reader that dies without a word
    t = time.perf_counter()
    with pytest.raises(PackerError, match="stalled"):
        build(BuildConfig.of(inputs=(corpus,), out=str(tmp_path / "out"), seq_len=256, workers=1, unit_bytes=50_000))
    assert time.perf_counter() - t < 30
