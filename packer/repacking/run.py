"""Where repack units run: worker processes on this machine, or Ray tasks (``--engine ray``).

Each unit is one call of ``repack_unit``: read a source shard, pack, write. Locally the units go to a pool
of forked workers under packer's signal rules (packer/procs.py: they die with this process, Ctrl-C stops
the pool with finished units kept, a stopped or dead worker ends the run in one line), at most two units
per worker in flight so memory stays bounded by the units in hand, not by the build. An object store is
not fork-safe (its client runs threads): there the units run on threads. The Ray engine is the build's
(``pipeline.RayEngine``), given ``repack_task`` as its unit.
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Iterator

from .. import procs
from ..errors import PackerError
from ..io import cpu_limit, storage_for
from .bucket_unit import BucketJob, bucket_unit
from .unit import RepackJob, RepackUnit, repack_unit


def run_units(todo: list[RepackUnit], job: RepackJob | BucketJob, workers: int, engine: str, ray_address: str | None,
              quiet: bool, progress) -> Iterator[tuple[RepackUnit, dict]]:
    """Repack the ``todo`` units; yield (unit, record) as each is written (in any order)."""
    if not todo:
        return
    if engine == "ray":
        from ..pipeline import ray_engine

        yield from ray_engine(workers, ray_address, quiet, repack_task).run(todo, job, progress)
        return
    n = max(1, min(workers or cpu_limit().count, len(todo)))
    if n == 1:
        for u in todo:
            rec = do_unit(job, u)
            progress.unit_done(u, rec["documents"], rec["tokens"])
            yield u, rec
        return
    forks = all(storage_for(p).fork_safe for p in {job.out, *(u.source for u in todo)}) and procs.can_fork()
    yield from _pooled(todo, job, n, forks, progress)


def do_unit(job: RepackJob | BucketJob, unit: RepackUnit) -> dict:
    """One unit: packed again at a new length, or decomposed into buckets (``--buckets``)."""
    return (bucket_unit if isinstance(job, BucketJob) else repack_unit)(job, unit)


def _pooled(todo, job, n: int, forks: bool, progress) -> Iterator[tuple[RepackUnit, dict]]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    if forks:
        pool = ProcessPoolExecutor(n, mp_context=mp.get_context("fork"), initializer=procs.start_worker)
    else:
        pool = ThreadPoolExecutor(n, thread_name_prefix="packer-repack")
    watch = procs.Watch("repack worker", "packer repack", "rerun with --resume")
    pending = list(reversed(todo))  # popped from the end: unit order
    running: dict[Future, RepackUnit] = {}
    kill = nudge = False
    try:
        if forks:
            procs.started(pool, watch)
        while pending or running:
            while pending and len(running) < 2 * n:
                u = pending.pop()
                running[pool.submit(do_unit, job, u)] = u
            done, _ = wait(list(running), timeout=procs.QUIET_S, return_when=FIRST_COMPLETED)
            if not done and forks:
                watch.look(pool)
            for fut in done:
                u = running.pop(fut)
                rec = fut.result()
                progress.unit_done(u, rec["documents"], rec["tokens"])
                yield u, rec
    except BrokenProcessPool:
        kill = True
        raise PackerError("a repack worker died (killed, or out of memory); finished units are kept: "
                          "rerun with --resume") from None
    except procs.WorkerStopped:
        kill = True
        raise
    except (KeyboardInterrupt, GeneratorExit):
        nudge = forks
        raise
    finally:
        if forks:
            procs.close(pool, kill_first=kill, nudge=nudge)
        else:
            pool.shutdown(wait=True, cancel_futures=True)


def repack_task(job: RepackJob | BucketJob, unit: RepackUnit, cwd: str):
    """What a Ray worker runs for one unit: its record, streamed as the build's task streams its steps.
    Relative local paths mean what they meant to the driver."""
    local = [p for p in (job.out, unit.source) if storage_for(p).local]
    if local and os.getcwd() != cwd and any(not os.path.isabs(p) for p in local):
        try:
            os.chdir(cwd)
        except OSError:
            raise PackerError(f"relative paths need the folder {cwd} on every Ray node; give absolute paths "
                              "on a shared filesystem, or URIs") from None
    yield do_unit(job, unit)
