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

Ray is imported only here, only when ``--engine ray`` is asked for
(``pip install packer[ray]``).
"""

from __future__ import annotations

import logging
import os
from typing import Iterator

from ... import shards as S
from ...errors import PackerError
from ...io import storage_for
from ...io.cpus import cpu_limit
from ..plan import Unit
from ..unit import Job, assemble_unit, encode_chunk
from .base import Chunk, FirstTask, Progress, cut_chunks
from .worker import prepare_worker

MAX_RETRIES = 3  # a unit is run again this many times after its worker dies
FORWARD_ENV = ("PACKER_FAULT", "PACKER_FAULT_UNIT")  # fault injection (packer/faults.py) reaches the tasks


def run_unit(job: Job, unit: Unit) -> dict:
    """Read, tokenize, pack and write one unit in this process; return its record."""
    chunks = [encode_chunk(job, unit.index, ev.parts)
              for ev in cut_chunks([unit], job.read_field, job.output.max_record_bytes) if isinstance(ev, Chunk)]
    return assemble_unit(job, unit, chunks)


def packer_unit(job: Job, unit: Unit, cwd: str) -> dict:
    """What a Ray worker runs for one unit (its process title reads ray::packer_unit meanwhile)."""
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
    return run_unit(job, unit)


class RayEngine:
    """Each unit a Ray task (``--engine ray``): on a cluster, with retries; the same bytes as the local engine."""

    name = "ray"

    def __init__(self, workers: int = 0, address: str | None = None, quiet: bool = False):
        self.workers, self.address, self.quiet = workers, address, quiet
        self.notes: list[str] = []

    def run(self, todo: list[Unit], job: Job, progress: Progress,
            first: FirstTask | None = None) -> Iterator[tuple[Unit, dict]]:
        if first is not None and not first.run_here(job):  # here, in the driver, before any unit
            return
        started = _connect(self.address, self.workers, self.quiet)
        import ray

        try:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            in_flight = max(1, min(self.workers or cpus, len(todo)))
            yield from _run_tasks(todo, job, progress, in_flight)
            nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
            self.notes.append(f"engine ray: {len(todo)} unit(s) as tasks on {cpus} CPU(s), {nodes} node(s), "
                              f"at most {in_flight} at once")
        finally:
            if started:
                ray.shutdown()


def _connect(address: str | None, workers: int, quiet: bool) -> bool:
    """Connect to Ray (or start it here); True if this call started it."""
    try:
        import ray
    except ImportError:
        raise PackerError("--engine ray needs Ray: pip install 'packer[ray]'") from None
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    kwargs = dict(logging_level=logging.WARNING, log_to_driver=not quiet)
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:  # a private Ray on this machine, stopped at the end of the build
            ray.init(address="local", num_cpus=workers or cpu_limit().count, include_dashboard=False, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise PackerError(f"cannot connect to Ray at {address or 'a new local instance'}: {str(e).strip().splitlines()[0]}") from None
    return True


def _run_tasks(todo: list[Unit], job: Job, progress: Progress, in_flight: int) -> Iterator[tuple[Unit, dict]]:
    """The ``todo`` units as Ray tasks, at most ``in_flight`` at once; yield (unit, record) as each ends."""
    import ray

    env = {k: os.environ[k] for k in FORWARD_ENV if k in os.environ}
    opts = dict(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)
    if env:
        opts["runtime_env"] = {"env_vars": env}
    task = ray.remote(**opts)(packer_unit)
    job_ref = ray.put(job)  # the Job holds the tokenizer JSON (MBs): stored once, not per task
    cwd = os.getcwd()
    pending = list(reversed(todo))  # popped from the end: unit order
    running: dict = {}  # ObjectRef -> Unit
    try:
        while pending or running:
            while pending and len(running) < in_flight:
                u = pending.pop()
                running[task.remote(job_ref, u, cwd)] = u
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                u = running.pop(ref)
                rec = _result(ref, u, job)
                progress.unit_done(u, rec["documents"], rec["tokens"])
                yield u, rec
    except BaseException:
        for ref in running:
            ray.cancel(ref, force=True)
        raise


def _result(ref, u: Unit, job: Job) -> dict:
    """A finished task's record, or the one-line error a local build would give."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    try:
        rec = ray.get(ref)
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
    if storage_for(job.out).size(rec["path"]) != rec["bytes"]:
        raise PackerError(f"unit {u.index}'s shard was written on a Ray node but is not in {job.out} here: "
                          "with --engine ray, OUT must be on a filesystem every node shares, or a URI")
    return rec
