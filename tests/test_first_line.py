"""issue 55.4: feedback from the first second. packer build says what it builds on its first line of
stderr, before the tokenizer loads and before the summary; -q silences it, and Ray's driver warnings."""

from __future__ import annotations

import contextlib
import logging
import sys
import types

from tests._cli import cli


def test_the_first_line_names_the_inputs_and_the_output_before_the_summary(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.txt").write_text("hello there\n")
    out = tmp_path / "out"
    r = cli("build", str(src), str(out), "--seq-len", "64", "--workers", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == f"packer: building {out} from {src} (tokenizer: bytes)"
    assert any(ln.startswith(f"built {out} in ") for ln in lines[1:])  # the summary comes after it
    quiet = cli("build", str(src), str(tmp_path / "q"), "--seq-len", "64", "--workers", "1", "-q")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_quiet_ray_logs_errors_only_on_the_driver(monkeypatch):
    from packer.pipeline.engines import ray as engine

    seen = []
    fake = types.SimpleNamespace(is_initialized=lambda: False, init=lambda **kw: seen.append(kw))
    monkeypatch.setitem(sys.modules, "ray", fake)
    watchdog = types.SimpleNamespace(marking=contextlib.nullcontext)
    engine._connect(None, 1, True, watchdog)
    engine._connect(None, 1, False, watchdog)
    assert (seen[0]["logging_level"], seen[0]["log_to_driver"]) == (logging.ERROR, False)
    assert (seen[1]["logging_level"], seen[1]["log_to_driver"]) == (logging.WARNING, True)
