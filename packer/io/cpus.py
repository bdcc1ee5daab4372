"""How many CPUs this process may really use: the fewest of the CPUs it may run on
(``sched_getaffinity``: taskset, numactl, a Slurm or Kubernetes cpuset) and its cgroup's CPU
quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, of its own cgroup and
every one above it), rounded up.

``os.cpu_count()`` is the host's: a container given 4 CPUs of a 64-core host that starts 64
workers runs them in turns, each for a sixteenth of the time, with 64 times the memory. The
cgroup files are found as packer/io/memory.py finds the memory limit's, through its
``CGROUP_ROOT`` and ``SELF_CGROUP`` (a test fakes them there).
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

from . import memory


class CpuLimit(NamedTuple):
    count: int  # >= 1
    source: str  # what sets it, for a message: "the CPUs this process may run on (taskset, cpuset)", ...


def cpu_limit(root: str | None = None, self_cgroup: str | None = None) -> CpuLimit:
    """The CPUs this process may use, and what sets it. ``root`` and ``self_cgroup`` default to
    memory.CGROUP_ROOT and memory.SELF_CGROUP as they are at the call."""
    found = [_affinity()]
    found += [CpuLimit(n, f"the cgroup CPU quota ({path})")
              for n, path in cgroup_quotas(root or memory.CGROUP_ROOT, self_cgroup or memory.SELF_CGROUP)]
    return min(found, key=lambda c: c.count)


def _affinity() -> CpuLimit:
    try:
        return CpuLimit(max(1, len(os.sched_getaffinity(0))), "the CPUs this process may run on")
    except (AttributeError, OSError):  # macOS, Windows: no affinity call
        return CpuLimit(max(1, os.cpu_count() or 1), "this machine's CPUs")


def cgroup_quotas(root: str = memory.CGROUP_ROOT, self_cgroup: str = memory.SELF_CGROUP) -> list[tuple[int, str]]:
    """(CPUs, file) of each CPU quota set on this process's cgroups, v2 and v1, own cgroup first:
    ceil(quota / period), at least 1. [] where none is set ("max", -1) or there are no cgroups."""
    out = []
    for f in memory.cgroup_files(root, self_cgroup, "cpu.max", "cpu", "cpu.cfs_quota_us"):
        if f.endswith("cpu.max"):  # "QUOTA PERIOD" in microseconds, or "max PERIOD"
            fields = _read(f).split()
            quota, period = fields if len(fields) == 2 else ("", "")
        else:  # v1: the period is in a file of its own beside the quota; -1 = no quota
            quota, period = _read(f), _read(os.path.join(os.path.dirname(f), "cpu.cfs_period_us"))
        if quota.isdigit() and period.isdigit() and int(quota) > 0 and int(period) > 0:
            out.append((max(1, math.ceil(int(quota) / int(period))), f))
    return out


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(64).strip()
    except OSError:
        return ""
