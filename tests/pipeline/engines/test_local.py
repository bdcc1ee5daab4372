"""The local engine under signals: workers never outlive the build's process, and a stopped worker
fails the build in one line instead of hanging it (issue 33.1; docs/reliability.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests._services import folder_files
from tests.conftest import packer_cli as packer
from tests.conftest import write_jsonl

ARGS = ["--seq-len", "256", "--unit-mb", "0.05", "--workers", "2", "-q"]
pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process state from /proc")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("signals") / "c.jsonl"
    write_jsonl(path, [f"document {i} " + "lorem ipsum dolor sit amet " * (i % 50 + 1) for i in range(6000)])
    return str(path)


def children(pid: int) -> set[int]:
    """The live child processes of ``pid``."""
    out = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.update(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_slow_build(corpus, out, seconds: float = 2.0):
    """A build whose chunks take ``seconds`` each (faults point "slow"); returns it once both workers are inside a
    chunk (each says so: PACKER_FAULT_READY), with their pids."""
    ready = out + "-ready"
    os.makedirs(ready)
    p = subprocess.Popen([sys.executable, "-m", "packer.cli", "build", corpus, out, *ARGS], start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PACKER_FAULT": "slow", "PACKER_FAULT_READY": ready,
                              "PACKER_FAULT_SLOW_S": str(seconds)})
    deadline = time.time() + 60
    while time.time() < deadline and alive(p.pid):
        at_work = {int(pid) for pid in os.listdir(ready)}
        if len(at_work) >= 2:  # both workers inside a chunk
            return p, at_work
        time.sleep(0.05)
    p.kill()
    raise AssertionError(f"the build's workers did not start: {p.communicate()}")


def wait_gone(pids, seconds=10.0) -> set[int]:
    deadline = time.time() + seconds
    while time.time() < deadline and any(alive(c) for c in pids):
        time.sleep(0.05)
    return {c for c in pids if alive(c)}


@pytest.fixture(scope="module")
def clean(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("clean") / "out")
    r = packer("build", corpus, out, *ARGS)
    assert r.returncode == 0, r.stderr
    return out


def assert_resumes_to(corpus, out, clean):
    r = packer("build", corpus, out, *ARGS, "--resume")
    assert r.returncode == 0, r.stderr  # the lock is free: no worker holds it
    assert folder_files(out) == folder_files(clean)


@pytest.mark.slow
def test_ctrl_c_twice_leaves_no_worker_and_resume_works(tmp_path, corpus, clean):
    out = str(tmp_path / "out")
    p, workers = start_slow_build(corpus, out)
    os.killpg(p.pid, signal.SIGINT)  # the terminal sends Ctrl-C to the whole group
    time.sleep(0.1)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert not wait_gone(workers, 1.0), "workers outlived the build"  # (a chunk in hand takes 2 s)
    assert_resumes_to(corpus, out, clean)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_one_stop_signal_ends_the_build_without_waiting_for_the_task_in_hand(tmp_path, corpus, clean, sig):
    """Ctrl-C (to the group, as a terminal sends it) or SIGTERM (to the main process, as kill and docker stop
    send it) kills the workers at once: waiting for the chunk in hand took 10-17 s at load 16 (issue 55.5).
    Each worker's chunk here takes 10 minutes, so the build ends long before any could finish."""
    out = str(tmp_path / "out")
    p, workers = start_slow_build(corpus, out, seconds=600)
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)
    else:
        os.kill(p.pid, sig)
    try:
        _, err = p.communicate(timeout=60)  # (a hang guard: before, this waited out the 10-minute chunk)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 128 + sig, err
    assert "--resume" in err and "Traceback" not in err
    assert not wait_gone(workers, 5.0), "workers outlived the build"
    assert_resumes_to(corpus, out, clean)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_workers_die_with_the_main_process(tmp_path, corpus, clean, sig):
    """SIGHUP (a closed terminal) stops the build as SIGTERM does; SIGKILL to the main process alone
    takes its workers with it (they are told to die with their parent)."""
    out = str(tmp_path / "out")
    p, workers = start_slow_build(corpus, out)
    os.kill(p.pid, sig)  # the main process alone
    _, err = p.communicate(timeout=60)
    assert p.returncode == (128 + sig if sig == signal.SIGHUP else -sig), err
    if sig == signal.SIGHUP:
        assert "terminated (SIGHUP)" in err and "--resume" in err and "Traceback" not in err
    assert not wait_gone(workers, 1.0), "workers outlived the build"  # (a chunk in hand takes 2 s)
    assert_resumes_to(corpus, out, clean)


@pytest.mark.slow
def test_a_stopped_worker_fails_the_build_in_one_line(tmp_path, corpus, clean, monkeypatch):
    out = str(tmp_path / "out")
    p, workers = start_slow_build(corpus, out)
    victim = min(workers)
    os.kill(victim, signal.SIGSTOP)
    try:
        _, err = p.communicate(timeout=90)
    finally:
        if alive(victim):
            os.kill(victim, signal.SIGKILL)
    assert p.returncode == 2, err
    assert f"worker process {victim} is stopped" in err and "--resume" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not wait_gone(workers)
    assert_resumes_to(corpus, out, clean)
