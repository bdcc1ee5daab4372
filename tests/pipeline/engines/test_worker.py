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


# A build under a CPU limit (issue 39, item 4): as many workers as the CPUs this process may use, and
# no thread pool in them. Threads are counted from /proc/<pid>/task/*/stat (CPU ticks) while it runs.
_BUILD = (
    "import json, os, sys\n"
    "from packer.io import memory\n"
    "a = json.loads(sys.argv[1])\n"
    "if a['cpus']: os.sched_setaffinity(0, a['cpus'])\n"
    "if a['cgroup']: memory.CGROUP_ROOT, memory.SELF_CGROUP = a['cgroup']\n"
    "from packer import build\n"
    "build(a['input'], a['out'], seq_len=256, tokenizer=a['tok'], tokenizer_backend='hf', unit_mb=0.05, quiet=True)\n"
)


def _ticks(pid: int, into: dict) -> None:
    """{(pid, tid): CPU ticks} of ``pid``'s threads and its children's, the most seen so far."""
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                continue
            into[(p, int(t))] = max(into.get((p, int(t)), 0), int(fields[11]) + int(fields[12]))


def _watched_build(tmp_path, gpt2_path, cpus=None, cgroup=None) -> tuple[int, dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "c.parquet"  # parquet: its row groups decode in pyarrow's pool, where it has one
    pq.write_table(pa.table({"text": [f"document {i}: " + "the quick brown fox, 12 jumps. " * (40 + i % 60)
                                      for i in range(1200)]}), src, row_group_size=40)
    arg = {"cpus": cpus, "cgroup": cgroup, "input": str(src), "out": str(tmp_path / "out"), "tok": gpt2_path}
    proc = subprocess.Popen([sys.executable, "-c", _BUILD, __import__("json").dumps(arg)])
    seen: dict = {}
    while proc.poll() is None:
        _ticks(proc.pid, seen)
        time.sleep(0.02)  # (each look reads every thread's stat: a busier loop takes a core from the build it watches)
    assert proc.returncode == 0
    return proc.pid, seen


def _by_process(main: int, seen: dict) -> tuple[dict, list[int]]:
    """({worker pid: its ticks per thread}, the main process's ticks per thread)."""
    workers: dict = {}
    for (p, _), n in seen.items():
        if p != main:
            workers.setdefault(p, []).append(n)
    return workers, [n for (p, _), n in seen.items() if p == main]


def _pooled(ticks: list[int]) -> int:
    """Threads of one process with at least 5% of its CPU time (a pool's threads; the encoding thread and
    the reader thread are two)."""
    return sum(n >= 0.05 * sum(ticks) for n in ticks)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/self/task"),
                    reason="affinity and /proc are Linux's")
def test_a_build_under_taskset_runs_one_worker_a_cpu_and_no_pool(tmp_path, gpt2_path):
    cpus = sorted(os.sched_getaffinity(0))
    main, seen = _watched_build(tmp_path / "one", gpt2_path, cpus=cpus[:1])
    workers, ticks = _by_process(main, seen)
    assert workers == {}, f"one CPU: the build ran in its own process, not {len(workers)} workers"
    assert _pooled(ticks) <= 2, ticks
    if len(cpus) < 2:
        pytest.skip("one CPU here: no build of two workers to watch")
    main, seen = _watched_build(tmp_path / "two", gpt2_path, cpus=cpus[:2])
    workers, _ = _by_process(main, seen)
    assert len(workers) == 2 and all(_pooled(t) == 1 for t in workers.values()), workers  # one thread each: no pool


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/self/task"),
                    reason="affinity and /proc are Linux's")
def test_a_build_in_a_cgroup_of_one_cpu_runs_one_worker(tmp_path, gpt2_path):
    """A cgroup v2 quota of one CPU (a faked tree, read through packer/io/memory.py's CGROUP_ROOT):
    one worker, however many CPUs the affinity allows."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU here: a quota of one changes nothing")
    root = tmp_path / "cgroup"
    (root / "job").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "job" / "cpu.max").write_text("100000 100000\n")
    (tmp_path / "self").write_text("0::/job\n")
    main, seen = _watched_build(tmp_path, gpt2_path, cgroup=[str(root), str(tmp_path / "self")])
    workers, ticks = _by_process(main, seen)
    assert workers == {}, f"a quota of one CPU: the build ran in its own process, not {len(workers)} workers"
    assert _pooled(ticks) <= 2, ticks  # the encoding thread and the reader: no HF or pyarrow pool beside them
