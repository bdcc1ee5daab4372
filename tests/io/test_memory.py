"""packer/io/memory.py: the memory a process may really use, read from faked cgroup files (issue 33, item 14)."""

from __future__ import annotations

import pytest

from packer.errors import PackerError
from packer.io import memory

GIB = 1 << 30


def _tree(tmp_path, files: dict[str, str], self_cgroup: str) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "self").write_text(self_cgroup)
    return str(root), str(tmp_path / "self")


def test_cgroup_v2_limit_of_the_own_cgroup_or_one_above_it(tmp_path):
    root, me = _tree(tmp_path, {"cgroup.controllers": "memory\n", "job/memory.max": f"{4 * GIB}\n",
                                "job/step/memory.max": "max\n", "memory.max": "max\n"}, "0::/job/step\n")
    assert memory.cgroup_limits(root, me) == [(4 * GIB, f"{root}/job/memory.max")]
    got = memory.memory_limit(root, me)
    assert got.bytes <= 4 * GIB and ("cgroup" in got.source or got.bytes < 4 * GIB)


def test_cgroup_v1_and_a_container_whose_own_cgroup_is_the_mount(tmp_path):
    # v1: the memory controller's hierarchy; "no limit" is written as a page-rounded 2**63-1
    root, me = _tree(tmp_path, {"memory/slurm/job_7/memory.limit_in_bytes": f"{2 * GIB}\n",
                                "memory/memory.limit_in_bytes": "9223372036854771712\n"},
                     "5:cpu,cpuacct:/slurm/job_7\n4:memory:/slurm/job_7\n")
    assert memory.cgroup_limits(root, me) == [(2 * GIB, f"{root}/memory/slurm/job_7/memory.limit_in_bytes")]
    # inside a container /proc names a path the mount does not have: the mount's own file is the limit
    root, me = _tree(tmp_path / "c", {"cgroup.controllers": "", "memory.max": f"{GIB}\n"}, "0::/docker/ab12\n")
    assert memory.cgroup_limits(root, me) == [(GIB, f"{root}/memory.max")]
    root, me = _tree(tmp_path / "none", {}, "garbage line\n")
    assert memory.cgroup_limits(root, me) == [] and memory.cgroup_limits(root, str(tmp_path / "absent")) == []


def test_seq_len_is_checked_against_the_cgroup_limit_not_the_host(tmp_path, monkeypatch):
    """A row of --seq-len that fits the host's memory but not the 1 GiB a cgroup allows is refused in
    one line saying what the row needs (it passed, and the build was OOM-killed without a word)."""
    from packer import BuildConfig

    root, me = _tree(tmp_path, {"cgroup.controllers": "memory\n", "memory.max": f"{GIB}\n"}, "0::/\n")
    monkeypatch.setattr(memory, "CGROUP_ROOT", root)
    monkeypatch.setattr(memory, "SELF_CGROUP", me)
    assert memory._physical() > 2 * GIB, "the host must have more memory than the row needs"
    seq_len = 2 * GIB // 80  # a row needs ~2 GiB while packing (ROW_BYTES_PER_SLOT)
    with pytest.raises(PackerError, match=r"--seq-len .* is too large: one row needs about 2\.0 GiB.* 1\.0 GiB"):
        BuildConfig.of(inputs=("x",), out=str(tmp_path / "out"), seq_len=seq_len)
    BuildConfig.of(inputs=("x",), out=str(tmp_path / "out"), seq_len=seq_len // 4)  # fits
