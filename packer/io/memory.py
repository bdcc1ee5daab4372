"""How much memory this process may really use: the smallest of the machine's memory, its cgroup's
limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, of its own cgroup and every one above it)
and ``RLIMIT_AS`` (``ulimit -v``).

A container or a batch job (Slurm, Kubernetes, systemd-run) is often given a few GiB of a big
host; a check against the host's memory passes, and the kernel's OOM killer then ends the build
with no message. Every file is read through ``root`` and ``self_cgroup`` so a test can fake them.
"""

from __future__ import annotations

import os
from typing import NamedTuple

CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"
_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63-1


class MemoryLimit(NamedTuple):
    bytes: int
    source: str  # what sets it, for a message: "this machine's memory", "the cgroup limit (/sys/fs/...)", ...


def memory_limit(root: str | None = None, self_cgroup: str | None = None) -> MemoryLimit:
    """The memory this process may use, and what sets it (a very large number where nothing is known).
    ``root`` and ``self_cgroup`` default to CGROUP_ROOT and SELF_CGROUP as they are at the call."""
    found = [MemoryLimit(_physical(), "this machine's memory")]
    found += [MemoryLimit(n, f"the cgroup memory limit ({path})")
              for n, path in cgroup_limits(root or CGROUP_ROOT, self_cgroup or SELF_CGROUP)]
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            found.append(MemoryLimit(soft, "the address-space limit (RLIMIT_AS, ulimit -v)"))
    except (ImportError, OSError, ValueError):
        pass
    return min(found, key=lambda m: m.bytes)


def _physical() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def cgroup_limits(root: str = CGROUP_ROOT, self_cgroup: str = SELF_CGROUP) -> list[tuple[int, str]]:
    """(limit in bytes, file) of each memory limit set on this process's cgroups, v2 and v1, from
    its own cgroup up to the root; [] where there are none (or no cgroups: macOS, Windows)."""
    out = []
    for f in cgroup_files(root, self_cgroup, "memory.max", "memory", "memory.limit_in_bytes"):
        n = _read_limit(f)
        if n is not None:
            out.append((n, f))
    return out


def cgroup_files(root: str, self_cgroup: str, v2_name: str, v1_controller: str, v1_name: str) -> list[str]:
    """The paths of a controller's file (``v2_name`` in the v2 hierarchy, ``v1_name`` in v1's
    ``v1_controller`` mount) in this process's cgroup and each one above it, own cgroup first; they
    may not exist (the caller reads them). [] where ``self_cgroup`` cannot be read (macOS, Windows)."""
    try:
        with open(self_cgroup, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 16).splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # v2: one hierarchy, mounted at root (or root/unified beside v1)
            base = root if os.path.exists(os.path.join(root, "cgroup.controllers")) else os.path.join(root, "unified")
            out += _walk(base, path, v2_name)
        elif v1_controller in controllers.split(","):
            mount = os.path.join(root, v1_controller)  # v1 mounts "cpu,cpuacct" with a "cpu" link beside it
            out += _walk(mount if os.path.exists(mount) else os.path.join(root, controllers), path, v1_name)
    return out


def _walk(base: str, path: str, name: str) -> list[str]:
    """``name`` in ``base/path`` and each folder up to ``base``. Inside a container the path
    /proc names may not exist under the mount (the container's own cgroup is its root): then
    only what is there counts."""
    out = []
    rel = path.strip("/")
    while True:
        f = os.path.join(base, rel, name) if rel else os.path.join(base, name)
        if f not in out:
            out.append(f)
        if not rel:
            return out
        rel = rel.rpartition("/")[0]


def _read_limit(path: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    if not text.isdigit():  # "max": no limit
        return None
    n = int(text)
    return n if 0 < n < _UNLIMITED else None
