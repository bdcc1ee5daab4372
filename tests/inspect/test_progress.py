"""The progress line of packer stats (packer/inspect/progress.py): on a terminal a bar, elsewhere a
plain line only once a run is long, and never a failure when stderr is closed."""

from __future__ import annotations

import io

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
