"""packer/pipeline/engines/worker.py: what every worker process does once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from packer.pipeline.engines.worker import prepare_worker


def test_prepare_worker_keeps_the_tokenizer_on_one_core(monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    prepare_worker()
    assert os.environ["RAYON_NUM_THREADS"] == "1" and os.environ["TOKENIZERS_PARALLELISM"] == "false"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_pool_worker_dies_with_its_parent(tmp_path):
    """A parent that forks a worker (set up as the pool's initializer does) and is then SIGKILLed
    takes the worker with it."""
    pidfile = tmp_path / "child"
    code = (
        "import os, sys, time\n"
        "from packer.pipeline.engines.worker import start_pool_worker\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    start_pool_worker('k', None)\n"
        f"    open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.time() < deadline
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the worker outlived its parent")


def test_the_initializer_files_the_job_under_its_key():
    """(In a child process: the initializer also sets this process's signals and its parent-death signal.)"""
    code = ("import signal\n"
            "from packer.pipeline.engines.worker import JOBS, start_pool_worker\n"
            "start_pool_worker('key-1', 'the job')\n"
            "assert JOBS == {'key-1': 'the job'}\n"
            "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"  # the parent handles Ctrl-C
            "assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
