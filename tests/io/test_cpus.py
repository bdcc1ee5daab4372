"""packer/io/cpus.py: the CPUs a process may use (affinity, cgroup v2/v1 CPU quota), read from faked cgroup files
(issue 39, item 4)."""

from __future__ import annotations

import os

import pytest

from packer.io import cpus, memory
from tests.io.test_memory import _tree  # a faked cgroup tree


def test_v2_quota_is_rounded_up_and_the_lowest_cgroup_up_the_tree_counts(tmp_path):
    root, me = _tree(tmp_path, {"cgroup.controllers": "cpu memory\n", "cpu.max": "max 100000\n",
                                "kubepods/cpu.max": "250000 100000\n", "kubepods/pod1/cpu.max": "max 100000\n"},
                     "0::/kubepods/pod1\n")
    assert cpus.cgroup_quotas(root, me) == [(3, f"{root}/kubepods/cpu.max")]  # 2.5 CPUs: 3 workers, not 2
    got = cpus.cpu_limit(root, me)
    assert got.count == min(3, len(os.sched_getaffinity(0)))
    root, me = _tree(tmp_path / "b", {"cgroup.controllers": "", "cpu.max": "50000 100000\n"}, "0::/\n")
    assert cpus.cpu_limit(root, me) == (1, f"the cgroup CPU quota ({root}/cpu.max)")  # half a CPU: one worker


def test_v1_quota_beside_its_period_under_the_cpu_cpuacct_mount(tmp_path):
    files = {"cpu,cpuacct/slurm/job_7/cpu.cfs_quota_us": "400000\n", "cpu,cpuacct/slurm/job_7/cpu.cfs_period_us": "100000\n",
             "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}
    root, me = _tree(tmp_path, files, "4:memory:/slurm/job_7\n2:cpu,cpuacct:/slurm/job_7\n0::/\n")
    assert cpus.cgroup_quotas(root, me) == [(4, f"{root}/cpu,cpuacct/slurm/job_7/cpu.cfs_quota_us")]
    os.symlink(os.path.join(root, "cpu,cpuacct"), os.path.join(root, "cpu"))  # as systemd mounts it
    assert cpus.cgroup_quotas(root, me) == [(4, f"{root}/cpu/slurm/job_7/cpu.cfs_quota_us")]


@pytest.mark.parametrize("text", ["max 100000", "", "garbage", "0 100000", "100000 0", "1 2 3", "-5 100000"])
def test_no_quota_or_a_damaged_file_leaves_the_affinity(tmp_path, text):
    root, me = _tree(tmp_path, {"cgroup.controllers": "cpu\n", "cpu.max": text + "\n"}, "0::/\n")
    assert cpus.cgroup_quotas(root, me) == []
    assert cpus.cpu_limit(root, me).count == len(os.sched_getaffinity(0))
    assert cpus.cpu_limit(root, str(tmp_path / "absent")).count == len(os.sched_getaffinity(0))  # no cgroups at all


def test_defaults_follow_memory_s_cgroup_root_at_the_call(tmp_path, monkeypatch):
    root, me = _tree(tmp_path, {"cgroup.controllers": "cpu\n", "cpu.max": "100000 100000\n"}, "0::/\n")
    monkeypatch.setattr(memory, "CGROUP_ROOT", root)
    monkeypatch.setattr(memory, "SELF_CGROUP", me)
    assert cpus.cpu_limit().count == 1
