"""packer/procs.py: the rules every worker pool follows (the build's and packer stats')."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from packer import procs


def test_no_fork_while_another_thread_runs_unless_it_is_named():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="a-lease-renewal", daemon=True)
    t.start()
    try:
        assert not procs.can_fork()  # a fork would copy that thread's locks
        others = {x.name for x in threading.enumerate() if x is not threading.current_thread()}
        assert procs.can_fork(ignore=tuple(others)) == ("fork" in __import__("multiprocessing").get_all_start_methods())
    finally:
        stop.set()
        t.join()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process state from /proc")
def test_a_stopped_process_is_seen_as_stopped_and_a_running_one_is_not():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not procs.stopped(p.pid)
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while not procs.stopped(p.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procs.stopped(p.pid)
        os.kill(p.pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while procs.stopped(p.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not procs.stopped(p.pid)
    finally:
        p.kill()
        p.wait()
    assert not procs.stopped(p.pid)  # gone: not stopped


def _sleep(s):
    time.sleep(s)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="POSIX signals")
def test_a_second_ctrl_c_kills_the_workers_instead_of_cutting_the_first_ones_clean_up_short():
    """The first Ctrl-C raises as Python's handler does; the second, arriving while the first one's clean-up
    waits for the workers, kills them and raises nothing, so that clean-up (the pool's shutdown) always runs
    to its end. Python's own handler raised a second KeyboardInterrupt wherever the clean-up stood."""
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(1)
    pool.submit(_sleep, 60)
    worker = procs.pids(pool)[0]
    guard = procs.SecondInterruptKills(lambda: pool)
    guard.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # (the signal lands here)
        os.kill(os.getpid(), signal.SIGINT)  # the second: no exception, the worker killed
        time.sleep(0.1)
        pool.shutdown(wait=True, cancel_futures=True)  # returns: nothing left to wait for
    finally:
        guard.restore()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)


_HALF_SENT = r"""
import multiprocessing as mp, os, signal, struct, sys, time
from concurrent.futures import ProcessPoolExecutor, wait
from packer import procs

def half_a_result():  # in the worker: a result's header and a little of it, then stopped, as a SIGSTOP under load can land
    os.write(pool._result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 100)
    os.kill(os.getpid(), signal.SIGSTOP)

pool = ProcessPoolExecutor(1, mp_context=mp.get_context("fork"))
fut = pool.submit(half_a_result)
worker = procs.pids(pool)[0]
while not procs.stopped(worker):
    time.sleep(0.01)
assert not wait([fut], timeout=0.5).done
t = time.monotonic()
procs.close(pool, kill_first=True)
print(f"closed {time.monotonic() - t:.1f}", flush=True)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process state from /proc")
def test_a_pool_given_up_with_half_a_result_in_its_pipe_closes():
    """A worker stopped half-way through sending its result left the pool's manager thread reading for ever
    (the parent holds the pipe's other write end): close(kill_first=True) waited on it, and a checker
    SIGSTOPped under load hung packer stats. Now the workers are killed, that write end closed, and the
    read ends; the interpreter's exit, which joins the thread too, is not held either."""
    p = subprocess.run([sys.executable, "-c", _HALF_SENT], capture_output=True, text=True, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert p.returncode == 0 and p.stdout.startswith("closed"), (p.stdout, p.stderr)
    assert float(p.stdout.split()[1]) < procs.QUIET_S * 3


_HALF_SENT_THEN_DEAD = _HALF_SENT.replace("os.kill(os.getpid(), signal.SIGSTOP)", "os.kill(os.getpid(), signal.SIGKILL)").replace(
    """while not procs.stopped(worker):
    time.sleep(0.01)
assert not wait([fut], timeout=0.5).done
""", """from concurrent.futures.process import BrokenProcessPool
watch, looks = procs.Watch("worker", "the run", "run it again"), 0
try:
    while not wait([fut], timeout=0.5).done:  # as packer stats and the build wait on their workers
        watch.look(pool)
        looks += 1
except BrokenProcessPool as e:
    print("broken:", e, "after", looks, "looks", file=sys.stderr)
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process state from /proc")
def test_a_worker_dead_half_way_through_its_result_breaks_the_pool_it_does_not_hang():
    """Killed half-way through sending its result, a worker left the pool's manager thread waiting for the rest,
    so the pool never broke and the caller waited for ever; now the watch finds it ended and breaks the pool."""
    p = subprocess.run([sys.executable, "-c", _HALF_SENT_THEN_DEAD], capture_output=True, text=True, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert p.returncode == 0 and p.stdout.startswith("closed"), (p.stdout, p.stderr)
    assert "broken: worker" in p.stderr and "ended after 1 looks" in p.stderr, p.stderr


_STOPPED_AT_START = r"""
import multiprocessing as mp, os, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
from packer import procs

procs.QUIET_S = 0.5
def stop_myself():
    os.kill(os.getpid(), signal.SIGSTOP)

pool = ProcessPoolExecutor(1, mp_context=mp.get_context("fork"), initializer=stop_myself)
worker = None
try:
    procs.started(pool, procs.Watch("worker", "the run", "run it again"))
except procs.WorkerStopped as e:
    print("stopped:", e, flush=True)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process state from /proc")
def test_a_worker_stopped_before_the_first_task_is_one_line_not_a_hang():
    """The pool's first task (which forks the workers) was waited for unwatched, with Ctrl-C held: a worker
    stopped at its start hung packer stats and the build for good. Now it is watched as every task is."""
    p = subprocess.run([sys.executable, "-c", _STOPPED_AT_START], capture_output=True, text=True, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert p.returncode == 0 and p.stdout.startswith("stopped: worker ") and "is stopped" in p.stdout, (p.stdout, p.stderr)
