"""The progress line of packer stats (packer/inspect/progress.py): on a terminal a bar, elsewhere a
plain line only once a run is long, and never a failure when stderr is closed."""

from __future__ import annotations

import io

import pytest

from packer.inspect import progress as P
from packer.inspect.stats import check


def test_a_quick_run_off_a_terminal_prints_nothing(sample_build):
    out = io.StringIO()
    bar = P.Progress("verify", stream=out, tty=False)
    assert check(sample_build, progress=bar).ok
    assert out.getvalue() == "" and bar.total == bar.done > 0  # every byte counted, against the manifest's total


def test_a_long_run_off_a_terminal_says_how_far_it_is(sample_build, monkeypatch):
    monkeypatch.setattr(P, "EVERY", 0.0)
    out = io.StringIO()
    bar = P.Progress("verify", stream=out, tty=False)
    check(sample_build, progress=bar, workers=2)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("packer stats: verify ") and "GB" in line and "shard(s)" in line for line in lines)
    assert "(100%)" in lines[-1]


def test_a_closed_stderr_silences_it(sample_build, monkeypatch):
    monkeypatch.setattr(P, "EVERY", 0.0)
    out = io.StringIO()
    out.close()
    assert check(sample_build, progress=P.Progress("verify", stream=out, tty=False)).ok


def test_on_a_terminal_it_is_a_bar_over_the_manifests_bytes(sample_build):
    import threading

    before = set(threading.enumerate())
    out = io.StringIO()
    bar = P.Progress("verify", stream=out, tty=True)
    check(sample_build, progress=bar)
    assert bar.bar is not None and bar.bar.total == bar.done
    bar.close()
    assert set(threading.enumerate()) <= before  # no tqdm monitor left behind (it would make builds spawn)
    from tqdm import tqdm
    assert tqdm.monitor_interval == 10  # tqdm's own setting is the caller's again
    assert P.progress_for("verify", quiet=True) is None


def _build_on_a_pty(tmp_path, rows: int, cols: int) -> str:
    """``packer build`` of one unit of 5 chunks, each 0.6 s longer (the slow fault point), on a pty of
    ``rows`` x ``cols`` (0 x 0: one that reports no size, as docker exec and CI runners leave it); its output."""
    import fcntl
    import json
    import os
    import pty
    import struct
    import sys
    import termios

    corpus = tmp_path / "c.jsonl"
    with open(corpus, "w") as f:
        for i in range(1300):
            f.write(json.dumps({"text": f"document {i} " + "lorem ipsum dolor sit amet " * 36}) + "\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal's size, then packer
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            os.execve(sys.executable, [sys.executable, "-m", "packer", "build", str(corpus), str(tmp_path / "out"),
                                       "--workers", "1", "--seq-len", "256"],
                      {**os.environ, "PACKER_FAULT": "slow", "PACKER_FAULT_SLOW_S": "0.6"})
        finally:
            os._exit(127)
    out = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # (EIO: the child has closed the pty)
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    return out.decode("utf-8", "replace")


@pytest.mark.parametrize("rows,cols", [(24, 100), (0, 0)])
def test_the_build_bar_moves_inside_one_unit_on_a_terminal_of_any_size(tmp_path, rows, cols):
    """On a terminal the bar counts input bytes as chunks are tokenized, so it moves inside one large unit (with
    --workers 1 it went from 0% to 100% at the unit's end: the chunks read ahead were told first), also on a pty
    of no size (0x0: the bar printed nothing there), and the build's own line follows it (issue 55.4)."""
    import re

    out = _build_on_a_pty(tmp_path, rows, cols)
    inside = {int(p) for p in re.findall(r"build:\s+(\d+)%\|", out) if 0 < int(p) < 100}  # (one unit: all inside it)
    assert len(inside) >= 2, out  # (5 chunks, 0.6 s apart; the bar redraws every 0.5 s at most)
    assert re.search(r"build: 100%", out), out
    assert re.search(r"\nbuilt \S+ in [\d.]+s \(1 unit run, 0 already done\)", out.replace("\r", "")), out
