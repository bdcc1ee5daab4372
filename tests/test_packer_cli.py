"""packer_cli, the `packer` command's entry point outside the package: Ctrl-C while packer loads."""

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
    code = ("import os, signal, sys, threading, packer_cli; "
            f"t = threading.Timer({delay}, os.kill, (os.getpid(), signal.SIGINT)); t.daemon = True; t.start(); "
            "packer_cli.main()")
    p = subprocess.run([sys.executable, "-c", code, "stats", str(tmp_path)], capture_output=True, text=True,
                       timeout=60, start_new_session=True)
    assert "Traceback" not in p.stderr, p.stderr
    # Interrupted while loading: 130; if loading won the race, the command ran (no build here: 2).
    assert p.returncode in (130, 2), (p.returncode, p.stderr)

