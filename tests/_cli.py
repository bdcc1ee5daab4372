"""Helpers for tests that run the CLI in a process of its own and check that a failure is one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.formats.test_awkward_inputs import jl

ARGS = ["--seq-len", "128", "--unit-mb", "0.02", "--workers", "1", "-q"]


def cli(*args, env=None, timeout=120, **kw):
    """The CLI in a process (and session) of its own."""
    return subprocess.run([sys.executable, "-m", "packer.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, start_new_session=True, **kw)


def error_lines(stderr: str) -> list[str]:
    """stderr's lines but the build's first line (what it builds, said at once: issue 55.4), which is
    progress, not the failure."""
    return [ln for ln in stderr.strip().splitlines() if ln.strip() and not ln.startswith("packer: building ")]


def one_line(r, *words):
    """A failure told in one line (``words`` in it), no traceback (the build's first line aside: ``error_lines``)."""
    lines = error_lines(r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1, lines
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def corpus(tmp_path):
    """Four jsonl files of 300 documents: several units at ``--unit-mb 0.02``."""
    root = tmp_path / "in"
    root.mkdir()
    for i in range(4):
        (root / f"{i}.jsonl").write_bytes(jl(*({"text": f"doc {i}-{k} " + "words " * (k % 17)} for k in range(300))))
    return str(root)
