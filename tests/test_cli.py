"""packer/cli.py: signals, a closed stdout and the command's end (the CLI run in processes of its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from packer import build
from packer.errors import PackerError
from tests._cli import ARGS, corpus, error_lines, one_line  # noqa: F401 - corpus is a fixture
from tests.conftest import invoke as run_cli
from tests.formats.test_awkward_inputs import jl


# 6. SIGTERM to the main process is handled as Ctrl-C: workers gone, resume command printed.
def test_sigterm_stops_cleanly_leaves_no_process_and_says_how_to_resume(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    for i in range(8):
        (root / f"{i}.jsonl").write_bytes(jl(*({"text": "lorem ipsum dolor " * (1 + k % 50)} for k in range(2000))))
    out = str(tmp_path / "out")
    args = ["build", str(root), out, "--seq-len", "256", "--unit-mb", "0.1", "--workers", "2", "-q"]
    p = subprocess.Popen([sys.executable, "-m", "packer.cli", *args], start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    units = os.path.join(out, "units")
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.isdir(units) and os.listdir(units)) and p.poll() is None:
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)  # to the main process only, as kill PID / docker stop send it
    _, err = p.communicate(timeout=60)
    if p.returncode == 0:
        pytest.skip("build finished before SIGTERM arrived")
    assert p.returncode == 143, err
    assert "Traceback" not in err and "terminated" in err and "--resume" in err
    # Workers, the forkserver and the resource tracker are gone with it (none
    # holds the caller's stderr: communicate() above returned).
    for _ in range(100):
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("processes of the build outlived it")
    # ... and so is its folder of chunk files (packer/pipeline/spill.py), in /dev/shm or the temporary folder
    import tempfile

    for base in ("/dev/shm", tempfile.gettempdir()):
        left = [n for n in (os.listdir(base) if os.path.isdir(base) else []) if n.startswith(f"packer-spill-{p.pid}-")]
        assert left == [], (base, left)
    build(str(root), out, seq_len=256, unit_mb=0.1, workers=2, resume=True)
    assert run_cli("stats", out).exit_code == 0


def test_cli_in_process_leaves_sigterm_as_it_found_it(tmp_path, corpus):
    before = signal.getsignal(signal.SIGTERM)
    res = run_cli("build", corpus, str(tmp_path / "out"), *ARGS)
    assert res.exit_code == 0, res.output
    assert signal.getsignal(signal.SIGTERM) is before


def test_stats_into_a_closed_pipe_exits_quietly(sample_build):
    rfd, wfd = os.pipe()
    os.close(rfd)  # the reader is gone before the first line, as `| head -0` would be
    try:
        r = subprocess.run([sys.executable, "-m", "packer.cli", "stats", sample_build], stdout=wfd,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(wfd)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Broken pipe" not in r.stderr


# The command ends without the interpreter's teardown (0.1 s after every build, serial), yet with
# all its output written and its exit status kept.
def test_the_command_ends_at_once_with_its_output_and_status(tmp_path, corpus):
    code = ("import atexit, sys, packer.cli; atexit.register(lambda: sys.stderr.write('TEARDOWN\\n')); "
            "packer.cli.run()")

    def packer(*args, **kw):
        return subprocess.run([sys.executable, "-c", code, *args], text=True, timeout=120, start_new_session=True, **kw)

    out = tmp_path / "o"
    r = packer("build", corpus, str(out), *ARGS, capture_output=True)
    assert r.returncode == 0, r.stderr
    assert "TEARDOWN" not in r.stderr  # the process ended at once: no atexit hook ran
    with open(tmp_path / "stats.txt", "w") as f:  # a file, not a terminal: block-buffered, flushed before the end
        r = packer("stats", str(out), stdout=f, stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    written = (tmp_path / "stats.txt").read_text()
    assert "documents" in written and written == run_cli("stats", str(out)).output  # in process: no exit of ours
    r = packer("stats", str(tmp_path / "nothing"), capture_output=True)
    assert r.returncode == 2
    one_line(r, "no such build folder")



# --- Option parsing, --help and exit codes (in process: click's runner keeps stdout and stderr apart). ---
import json  # noqa: E402


def _mistake(*args) -> str:
    """``packer *args`` is a user mistake: exit 2, one line on stderr, no traceback, nothing on stdout."""
    from click.testing import CliRunner

    from packer.cli import main

    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.stderr, (r.exit_code, r.output)
    lines = error_lines(r.stderr)  # (a build's first line, what it builds, is progress: issue 55.4)
    assert len(lines) == 1 and lines[0].startswith("packer: error: "), lines
    return lines[0]


@pytest.mark.parametrize("command", ["build", "stats", "show"])
def test_help_lists_every_option_of_the_command(command):
    from packer.cli import main

    res = run_cli(command, "--help")
    assert res.exit_code == 0
    opts = [o for p in main.commands[command].params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
    assert opts and [o for o in opts if o not in res.output] == [] and "--help" in res.output
    assert res.output.startswith(f"Usage: main {command} [OPTIONS]")


def _given_to_build(monkeypatch, *flags) -> "BuildConfig":
    """The config ``packer build in out FLAGS`` hands the Python API (which is not run)."""
    import packer.pipeline
    from packer import BuildConfig

    seen = {}

    def fake_build(ins, out, progress=None, on_sized=None, on_note=None, exit_on_stop=False, **options):
        assert exit_on_stop  # the command's process ends after a stop: its build may leave that to it (issue 55.5)
        seen["cfg"] = BuildConfig.of(ins, out, **options)
        raise PackerError("stop")

    monkeypatch.setattr(packer.pipeline, "build", fake_build)
    assert run_cli("build", "in", "out", *flags).exit_code == 2
    return seen["cfg"]


def test_the_cli_flags_set_the_fields_the_python_keywords_set(monkeypatch):
    """Both are made from the settings' fields: the CLI's defaults are the dataclasses', and its spellings
    (--unit-mb, --no-eos, --no-bos, --max-record-mb, --bos, -q) set the fields build() sets."""
    from packer import BuildConfig

    assert _given_to_build(monkeypatch) == BuildConfig.of(["in"], "out")
    flags = ["--seq-len", "64", "--unit-mb", "0.5", "--no-eos", "--no-bos", "--max-record-mb", "2", "--tokenizer", "t.json",
             "--limit", "9", "--holdout", "0.1", "-q", "--workers", "3", "--tokenizer-follows", "file", "--pack", "concat"]
    cfg = _given_to_build(monkeypatch, *flags)
    assert cfg == BuildConfig.of(["in"], "out", seq_len=64, unit_mb=0.5, no_eos=True, no_bos=True, max_record_mb=2,
                                 tokenizer="t.json", limit=9, holdout=0.1, quiet=True, workers=3,
                                 tokenizer_follows="file", pack="concat")
    assert (cfg.output.unit_bytes, cfg.output.eos, cfg.output.bos, cfg.output.max_record_bytes) == (1 << 19, False, False, 2 << 20)
    assert _given_to_build(monkeypatch, "--bos", "<s>").output.bos_token == "<s>"


@pytest.mark.parametrize("flag, value", [("--chat-template", "t.jinja"), ("--train-on", "all"), ("--truncate", None)])
def test_a_chat_option_without_chat_exits_2_naming_it(tmp_path, flag, value):
    (tmp_path / "a.jsonl").write_bytes(jl({"text": "x"}))
    line = _mistake("build", str(tmp_path / "a.jsonl"), str(tmp_path / "out"), flag, *([value] if value else []))
    assert flag in line and "add --chat" in line
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_user_mistakes_exit_2_in_one_line_naming_what_is_wrong(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(jl({"text": "x"}))
    a, out = str(tmp_path / "a.jsonl"), str(tmp_path / "out")
    assert "--seq-len" in _mistake("build", a, out, "--seq-len", "1")
    assert "input not found" in _mistake("build", str(tmp_path / "nope.jsonl"), out) and "nope.jsonl" in _mistake(
        "build", str(tmp_path / "nope.jsonl"), out)
    assert "--resume" in _mistake("build", a, out, "--resume", "--overwrite")
    assert "no such build folder" in _mistake("stats", str(tmp_path / "nothing"))


@pytest.mark.parametrize("args, option", [(["--pack", "nope"], "--pack"), (["--seq-len", "abc"], "--seq-len"),
                                          (["--engine", "spark"], "--engine"), (["--no-such-flag"], "--no-such-flag")])
def test_an_option_click_refuses_exits_2_naming_it_without_a_traceback(tmp_path, args, option):
    from click.testing import CliRunner

    from packer.cli import main

    r = CliRunner().invoke(main, ["build", str(tmp_path), str(tmp_path / "out"), *args])
    assert r.exit_code == 2 and "Traceback" not in r.output and r.stdout == ""
    assert option in r.stderr.strip().splitlines()[-1]


def test_all_skipped_cli_exit_code(tmp_path):
    from click.testing import CliRunner

    from packer.cli import main

    p = tmp_path / "c.jsonl"
    p.write_bytes(jl({"body": "x"}, {"body": "y"}))
    r = CliRunner().invoke(main, ["build", str(p), str(tmp_path / "out"), "-q", "--summary-json", str(tmp_path / "s.json")])
    assert r.exit_code == 2 and "body" in r.output
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["ok"] is False and "body" in s["error"]


def test_a_build_without_tokenizer_says_once_that_it_tokenizes_to_bytes(tmp_path, gpt2_path):
    """Issue 55.3: no --tokenizer is the byte tokenizer, said in one note line (how to choose one); not with -q,
    not when a tokenizer is given; the Python API has it in its notes."""
    src = tmp_path / "a.jsonl"
    src.write_bytes(jl({"text": "one"}, {"text": "two"}))
    r = run_cli("build", str(src), str(tmp_path / "o"), "--seq-len", "64", "--workers", "1")
    assert r.exit_code == 0, r.output
    said = [ln for ln in r.output.splitlines() if "no --tokenizer" in ln]
    assert len(said) == 1 and said[0].startswith("note: no --tokenizer: tokenizing to bytes") and "pass --tokenizer" in said[0]
    r = run_cli("build", str(src), str(tmp_path / "q"), "--seq-len", "64", "--workers", "1", "-q")
    assert r.exit_code == 0 and "no --tokenizer" not in r.output
    r = run_cli("build", str(src), str(tmp_path / "t"), "--seq-len", "64", "--workers", "1", "--tokenizer", gpt2_path)
    assert r.exit_code == 0 and "no --tokenizer" not in r.output
    res = build([str(src)], str(tmp_path / "p"), seq_len=64, workers=1, quiet=True)
    assert sum("tokenizing to bytes" in n for n in res.notes) == 1
