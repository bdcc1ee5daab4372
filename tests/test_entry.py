"""packer._entry, the `packer` command's entry point: Ctrl-C while packer loads, and the one import package."""

from __future__ import annotations

import subprocess
import sys

import pytest


# 6 (start-up). Ctrl-C while packer is still loading: one line, exit 130, no traceback.
@pytest.mark.parametrize("delay", [0.02, 0.1, 0.3])
def test_ctrl_c_while_packer_loads_is_one_line(tmp_path, delay):
    # The process interrupts itself ``delay`` s after entering the entry point
    # (Python's own start-up, site and all, is not packer's to handle).
    # The timer is a daemon: if the command wins the race, the interpreter does not wait for it at exit
    # (a SIGINT delivered inside Python's own shutdown is not packer's).
    code = ("import os, signal, sys, threading, packer._entry; "
            f"t = threading.Timer({delay}, os.kill, (os.getpid(), signal.SIGINT)); t.daemon = True; t.start(); "
            "packer._entry.main()")
    p = subprocess.run([sys.executable, "-c", code, "stats", str(tmp_path)], capture_output=True, text=True,
                       timeout=60, start_new_session=True)
    assert "Traceback" not in p.stderr, p.stderr
    # Interrupted while loading: 130; if loading won the race, the command ran (no build here: 2).
    assert p.returncode in (130, 2), (p.returncode, p.stderr)



def test_python_m_packer_is_the_packer_command(tmp_path):
    """Where the script is not on PATH, ``python -m packer`` runs the same command (it said "No module named
    packer.__main__"): its usage names it, and a build through it is a build."""
    p = subprocess.run([sys.executable, "-m", "packer", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("Usage: python -m packer [OPTIONS] COMMAND"), p.stdout + p.stderr
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one document"}\n{"text": "another"}\n')
    p = subprocess.run([sys.executable, "-m", "packer", "build", str(src), str(tmp_path / "out"), "--seq-len", "16", "-q"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and (tmp_path / "out" / "manifest.json").exists(), p.stderr
    p = subprocess.run([sys.executable, "-m", "packer", "stats", str(tmp_path / "nowhere")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [f"packer: error: no such build folder: {tmp_path / 'nowhere'}"]


def test_the_distribution_holds_one_import_package():
    """Issue 54.4: the `packer` script is packer._entry:main and setuptools packages packer alone (packer_cli,
    a second top-level package for the cold start, is folded in)."""
    import os
    import tomllib

    from setuptools import find_packages

    from tests.conftest import REPO

    cfg = tomllib.load(open(os.path.join(REPO, "pyproject.toml"), "rb"))
    assert cfg["project"]["scripts"] == {"packer": "packer._entry:main"}
    found = find_packages(REPO, **cfg["tool"]["setuptools"]["packages"]["find"])
    assert "packer" in found and {p.split(".")[0] for p in found} == {"packer"}, found


def test_the_entry_point_loads_nothing_heavy_before_it_catches_ctrl_c():
    """``import packer._entry`` (the script's first line) imports neither numpy nor pyarrow: a Ctrl-C in that
    time is Python's own start-up, the rest is caught. packer.pack stays the function, the submodule loaded."""
    code = ("import sys, packer._entry, packer\n"
            "assert not {'numpy', 'pyarrow', 'click', 'packer.cli'} & set(sys.modules), sorted(sys.modules)\n"
            "import packer.pipeline, importlib\n"
            "assert callable(packer.pack) and packer.pack is importlib.import_module('packer.pack').pack\n"
            "assert packer.Layout is importlib.import_module('packer.pack').Layout")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
