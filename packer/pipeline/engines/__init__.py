"""Where units run: the ``Engine`` interface (base.py) and its two implementations.

``local.LocalEngine`` runs worker processes on this machine; ``ray.RayEngine``
runs each unit as a Ray task (Ray is imported only when it is asked for).
"""

from __future__ import annotations

from .base import Engine, FirstTask, Progress
from .local import LocalEngine

__all__ = ["Engine", "FirstTask", "Progress", "LocalEngine", "engine_for", "ray_engine"]


def engine_for(run, exit_on_stop: bool = False) -> Engine:
    """The engine that ``RunSettings`` ``run`` asks for (``run.engine``: "local" | "ray"); ``exit_on_stop``:
    the process ends once a stop (KeyboardInterrupt) leaves the engine (steps.build)."""
    if run.engine == "ray":
        from .ray import RayEngine

        return RayEngine(run.workers, run.ray_address, run.quiet, exit_on_stop=exit_on_stop)
    return LocalEngine(run.workers)


def ray_engine(workers: int = 0, address: str | None = None, quiet: bool = False, task=None) -> Engine:
    """A ``RayEngine`` running ``task(job, unit, cwd)`` per unit (default: a build's unit): ``packer repack``'s."""
    from .ray import RayEngine

    return RayEngine(workers, address, quiet, task)
