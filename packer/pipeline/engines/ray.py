"""The Ray engine: a build's units as Ray tasks (``packer build --engine ray``).

The task is the unit, whole: ``run_unit`` reads the unit's own slices (on the
worker, from a shared filesystem or an object store), tokenizes them with
``unit.encode_chunk`` (on chunks cut by ``base.cut_chunks``, as the local
engine cuts them) and packs and writes them with ``unit.assemble_unit``: the
same functions the local engine runs, composed in one process. So the
shards, the unit records and the manifest are byte-identical to a local
build, and ``--resume`` trusts unit records whichever engine wrote them.

What Ray adds: scheduling over every node of a cluster, and retries. A
worker that dies (killed, out of memory, its node lost) has its unit run
again elsewhere (``max_retries``); a unit whose retries run out fails the
build with one line, and ``--resume`` runs what is left. A unit writes its
shard, then its record, each whole, so a retried unit overwrites, never
mixes, what a dead attempt left.

Parallelism is per unit here (the local engine splits units into chunks):
a build needs many more units than cluster CPUs (``--unit-mb``) to use them.
At most ``workers`` units are in flight (default: the cluster's CPUs), so the
driver holds only their records and memory on a node is bounded by the units
it runs: a task's worker peaks at about 5 bytes per input byte of its unit
over a ~125 MB process (measured with GPT-2: docs/distributed.md).

A worker that makes no progress (a chunk tokenized, its unit written) for
``PACKER_RAY_STALL_S`` seconds (default 600; a stopped or hung process, which
Ray would wait on forever) fails the build in one line naming its unit. A
local Ray this build started is shut down at its end, and also after a
SIGKILL of the build: a watchdog process (``_Watchdog``) waits for the build's
end on a pipe and then kills every process of that Ray (those started with
its mark in their environment, and their descendants): Ray's own fate sharing stops its GCS and
raylet, but left the raylet's agents and starting workers running. A stopped
``packer`` command leaves it to the watchdog alone (``exit_on_stop``, issue 55.5).

Ray is imported only here, only when ``--engine ray`` is asked for
(``pip install packer[ray]``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
import uuid
from typing import Iterator

from ... import shards as S
from ...errors import PackerError
from ...io import storage_for
from ...io import cpu_limit
from ..plan import Unit
from ..unit import Job, assemble_unit, encode_chunk
from .base import Chunk, FirstTask, Progress, cut_chunks, input_bytes
from .worker import prepare_worker

MAX_RETRIES = 3  # a unit is run again this many times after its worker dies
FORWARD_ENV = ("PACKER_FAULT", "PACKER_FAULT_UNIT")  # fault injection (packer/faults.py) reaches the tasks
STALL_ENV, STALL_S = "PACKER_RAY_STALL_S", 600.0  # seconds a unit's task may go without progress
LOOK_S = 5.0  # the longest wait for a task's next step before the stall bound is looked at
OWNER_ENV = "PACKER_RAY_OWNER"  # marks the processes of a local Ray this build started (``_Watchdog``)


def run_unit(job: Job, unit: Unit) -> dict:
    """Read, tokenize, pack and write one unit in this process; return its record."""
    for rec in unit_steps(job, unit):
        if isinstance(rec, dict):
            return rec


def unit_steps(job: Job, unit: Unit) -> Iterator[dict | int]:
    """``run_unit`` a step at a time: after each chunk tokenized, the input bytes read for it (the driver's
    progress inside the unit), then the unit's record."""
    chunks, read = [], [0, 0]
    for ev in cut_chunks([unit], job.read_field, job.output.max_record_bytes, lambda n: read.__setitem__(0, read[0] + n)):
        if isinstance(ev, Chunk):
            chunks.append(encode_chunk(job, unit.index, ev.parts))
            yield input_bytes(ev.parts, read[0] - read[1])
            read[1] = read[0]
    yield assemble_unit(job, unit, chunks)


def packer_unit(job: Job, unit: Unit, cwd: str) -> Iterator[dict | int | None]:
    """What a Ray worker runs for one unit, streamed (its process title reads ray::packer_unit meanwhile):
    a step as each chunk is tokenized (the driver's sign of progress: its input bytes, or None), then the
    unit's record."""
    prepare_worker()
    local = [p for p in [job.out] + [sl.file.path for sl in unit.slices] if storage_for(p).local]
    if local and os.getcwd() != cwd and any(not os.path.isabs(p) for p in local):
        try:
            os.chdir(cwd)  # relative input/output paths mean what they meant to the driver
        except OSError:
            raise PackerError(f"relative paths need the folder {cwd} on every Ray node; give absolute paths "
                              "on a shared filesystem, or URIs") from None
    # A local path missing on this node is a cluster without a shared
    # filesystem, not a vanished file: say so rather than count "unreadable".
    for p in local:
        if not os.path.exists(os.path.join(p, S.SHARD_DIR) if p == job.out else p):
            import ray

            raise PackerError(f"{p} is not on Ray node {ray.util.get_node_ip_address()}: with --engine ray, inputs and "
                              "OUT must be on a filesystem every node shares, or URIs (s3://...)")
    yield from unit_steps(job, unit)


class RayEngine:
    """Each unit a Ray task (``--engine ray``): on a cluster, with retries; the same bytes as the local engine."""

    name = "ray"

    def __init__(self, workers: int = 0, address: str | None = None, quiet: bool = False, task=None,
                 exit_on_stop: bool = False):
        self.workers, self.address, self.quiet = workers, address, quiet
        # the process ends once a stop leaves run() (the packer command): a Ray this build started is left to
        # the watchdog, which kills it at that end, rather than shut down here (6 s at load 16, issue 55.5)
        self.exit_on_stop = exit_on_stop
        # ``task(job, unit, cwd)``: what a Ray worker runs for one unit, yielding None per step and then the
        # unit's record (``packer_unit``; ``packer repack`` gives its own: packer/repacking/run.py)
        self.task = task or packer_unit
        self.notes: list[str] = []

    def run(self, todo: list[Unit], job: Job, progress: Progress,
            first: FirstTask | None = None) -> Iterator[tuple[Unit, dict]]:
        if first is not None and not first.run_here(job):  # here, in the driver, before any unit
            return
        stall = _stall_bound()
        watchdog = _Watchdog()
        try:
            started = _connect(self.address, self.workers, self.quiet, watchdog)
        except BaseException:
            watchdog.close()
            raise
        import ray

        stopped = False
        try:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            in_flight = max(1, min(self.workers or cpus, len(todo)))
            yield from _run_tasks(todo, job, progress, in_flight, stall, self.task)
            nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
            self.notes.append(f"engine ray: {len(todo)} unit(s) as tasks on {cpus} CPU(s), {nodes} node(s), "
                              f"at most {in_flight} at once")
        except KeyboardInterrupt:
            stopped = True
            raise
        finally:
            if not (stopped and self.exit_on_stop):  # (else the process's end closes the watchdog's pipe)
                if started:
                    ray.shutdown()
                watchdog.close()  # (and what the shutdown left, it kills)


def _stall_bound() -> float:
    """``PACKER_RAY_STALL_S`` (seconds > 0), else ``STALL_S``."""
    raw = os.environ.get(STALL_ENV, "")
    try:
        bound = float(raw) if raw.strip() else STALL_S
    except ValueError:
        bound = -1.0
    if not bound > 0:
        raise PackerError(f"{STALL_ENV}={raw!r}: give the seconds a Ray worker may go without progress (a number > 0)")
    return bound


def _connect(address: str | None, workers: int, quiet: bool, watchdog) -> bool:
    """Connect to Ray (or start it here, its processes marked for ``watchdog``); True if this call started it."""
    try:
        import ray
    except ImportError:
        raise PackerError("--engine ray needs Ray: pip install 'packer[ray]'") from None
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    # -q: errors only, from the driver's Ray logger too (its warnings, e.g. about /dev/shm, leaked before)
    kwargs = dict(logging_level=logging.ERROR if quiet else logging.WARNING, log_to_driver=not quiet)
    held = _Handlers()
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:  # a private Ray on this machine, stopped at the end of the build (or by the watchdog)
            with watchdog.marking():
                ray.init(address="local", num_cpus=workers or cpu_limit().count, include_dashboard=False, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise PackerError(f"cannot connect to Ray at {address or 'a new local instance'}: {str(e).strip().splitlines()[0]}") from None
    finally:
        held.restore()
    return True


class _Handlers:
    """This process's SIGTERM, SIGINT and SIGHUP handlers, put back after ``ray.init``. It replaces SIGTERM's
    with its own (``sys.exit(15)``) and its core worker then with a native one (a crash dump, then abort):
    a SIGTERM under ``--engine ray`` ended with neither packer's line nor the resume command, exit 15 or
    SIGABRT (issue 53). Put back, it ends as on every engine (exit 143, packer/cli.py). (A SIGTERM that
    arrives while ``ray.init`` itself runs, a few seconds, still meets Ray's.)"""

    SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")

    def __init__(self):
        import signal
        import threading

        self.old = {}
        if threading.current_thread() is threading.main_thread():
            self.old = {getattr(signal, n): signal.getsignal(getattr(signal, n)) for n in self.SIGNALS if hasattr(signal, n)}

    def restore(self) -> None:
        import signal

        for signum, handler in self.old.items():
            if handler is not None:  # (None: set outside Python, not ours to put back)
                signal.signal(signum, handler)


def _run_tasks(todo: list[Unit], job: Job, progress: Progress, in_flight: int,
               stall: float, unit_task=packer_unit) -> Iterator[tuple[Unit, dict]]:
    """The ``todo`` units as Ray tasks, at most ``in_flight`` at once; yield (unit, record) as each ends.
    A task streams a step per chunk (``packer_unit``); one with no step for ``stall`` s fails the build."""
    import ray

    env = {k: os.environ[k] for k in FORWARD_ENV if k in os.environ}
    opts = dict(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False, num_returns="streaming")
    if env:
        opts["runtime_env"] = {"env_vars": env}
    task = ray.remote(**opts)(unit_task)
    job_ref = ray.put(job)  # the Job holds the tokenizer JSON (MBs): stored once, not per task
    cwd = os.getcwd()
    pending = list(reversed(todo))  # popped from the end: unit order
    running: dict = {}  # ObjectRefGenerator -> [Unit, time of its last step (time.monotonic)]
    try:
        while pending or running:
            while pending and len(running) < in_flight:
                u = pending.pop()
                running[task.remote(job_ref, u, cwd)] = [u, time.monotonic()]
            ready, _ = ray.wait(list(running), num_returns=1, timeout=min(LOOK_S, stall))
            for gen in ready:
                u = running[gen][0]
                running[gen][1] = time.monotonic()
                rec = _result(gen, u, job)
                if not isinstance(rec, dict):  # a step: None, or a chunk's input bytes
                    if rec:
                        progress.tokenized(0, 0, u, rec)
                    continue
                del running[gen]
                progress.unit_done(u, rec["documents"], rec["tokens"])
                yield u, rec
            _check_stall(running, stall)
    except BaseException:
        for gen in running:
            ray.cancel(gen, force=True)
        raise


def _check_stall(running: dict, stall: float) -> None:
    now = time.monotonic()
    late = [u for u, last in running.values() if now - last > stall]
    if late:
        raise PackerError(f"unit {late[0].index}'s Ray worker made no progress for {stall:g} s (stopped, or hung); "
                          f"finished units are kept: rerun with --resume ({STALL_ENV} sets the bound)")


def _result(gen, u: Unit, job: Job) -> dict | int | None:
    """A task's next step (``gen``: its stream, with a step ready): a chunk's input bytes (or None) for a
    chunk, its record at the end, or the one-line error a local build would give."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    try:
        rec = ray.get(next(gen))
    except RayTaskError as e:  # the task raised: the same error as a local build would
        cause = e.cause if isinstance(e.cause, BaseException) else None
        if cause is not None:
            raise cause from None
        raise PackerError(f"unit {u.index} failed on a Ray worker: {str(e).strip().splitlines()[-1]}") from None
    except RayError as e:
        raise PackerError(
            f"a Ray worker died ({type(e).__name__}: killed, out of memory, or its node lost) while building "
            f"unit {u.index}, {MAX_RETRIES + 1} times; nothing half-written was kept: rerun with --resume"
        ) from None
    except StopIteration:
        raise PackerError(f"unit {u.index}'s Ray task ended without its record (an internal error; please "
                          "report it); finished units are kept: rerun with --resume") from None
    if not isinstance(rec, dict):
        return rec
    if storage_for(job.out).size(rec["path"]) != rec["bytes"]:
        raise PackerError(f"unit {u.index}'s shard was written on a Ray node but is not in {job.out} here: "
                          "with --engine ray, OUT must be on a filesystem every node shares, or a URI")
    return rec


# The watchdog: a process of its own session (a Ctrl-C or a SIGKILL of the build's group does not reach it).
# Once a second, while the build runs, it notes every process whose environment holds its mark, and their
# descendants (Ray's agents and workers: their process titles overwrite what /proc shows of their
# environment, and they are reparented the moment the raylet dies). At EOF on its stdin (the build's end,
# however it ends) it SIGKILLs every one noted (pid and start time, so a reused pid is spared), until none
# is left for three looks in a row (at most 60 s); those after the first read only the noted and their descendants
# (a look at every process took 0.3-0.5 s at load 20: the watchdog outlived the build by 2-3 s, issue 55.5).
_GUARD = r"""
import os, select, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
mark, me = sys.argv[1].encode(), os.getpid()
known = {}
def look():
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != me:
            try:
                with open("/proc/%s/stat" % d, "rb") as f:
                    st = f.read().rsplit(b")", 1)[1].split()
                procs[int(d)] = (int(st[1]), st[19])
            except (OSError, IndexError, ValueError):
                pass
    for pid, (ppid, start) in procs.items():
        if pid in known:  # (the others are read again: one caught between its fork and its exec reads unmarked)
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                hit = mark in f.read().split(b"\0")
        except OSError:
            hit = False
        if hit:
            known[pid] = start
    grew = True
    while grew:
        grew = False
        for pid, (ppid, start) in procs.items():
            if pid not in known and ppid in known and procs.get(ppid, (0, b""))[1] == known[ppid]:
                known[pid], grew = start, True
    return procs
def look_known():
    procs, todo = {}, list(known)
    while todo:
        pid = todo.pop()
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                st = f.read().rsplit(b")", 1)[1].split()
            if pid in procs or known.setdefault(pid, st[19]) != st[19]:  # (a reused pid: not Ray's)
                continue
            procs[pid] = (int(st[1]), st[19])
            for t in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, IndexError, ValueError):
            pass
    return procs
while True:
    look()
    if select.select([0], [], [], 1.0)[0] and not os.read(0, 4096):
        break
quiet, end = 0, time.monotonic() + 60
looks = 0  # the noted first (killed at once), then one look at every process (one just started), then the noted
while quiet < 3 and time.monotonic() < end:
    procs, looks = look() if looks == 1 else look_known(), looks + 1
    found = [pid for pid, start in known.items() if pid in procs and procs[pid][1] == start]
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    quiet = 0 if found else quiet + 1
    time.sleep(0.1)
"""


class _Watchdog:
    """Kills the local Ray a build started once the build ends, also after its SIGKILL (Linux: /proc)."""

    def __init__(self):
        self.proc = None

    @contextlib.contextmanager
    def marking(self):
        """While the block starts Ray, its processes inherit the mark; the watchdog starts first."""
        if not os.path.isdir("/proc"):
            yield
            return
        mark = f"{OWNER_ENV}={uuid.uuid4().hex}"
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", _GUARD, mark], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        old = os.environ.get(OWNER_ENV)
        os.environ[OWNER_ENV] = mark.split("=", 1)[1]
        try:
            yield
        finally:  # this process's later children are not Ray's
            if old is None:
                os.environ.pop(OWNER_ENV, None)
            else:
                os.environ[OWNER_ENV] = old

    def close(self) -> None:
        """The build is over: the watchdog kills what is left of its Ray (and exits by itself)."""
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
