"""What every command shares (packer/cli_common.py): a user's mistake is one line and its exit code, Ctrl-C and
SIGTERM end a run with 130 / 128 + signal, and a block's signal handlers are the caller's again after it."""

from __future__ import annotations

import signal

import click
import pytest
from click.testing import CliRunner

from packer.cli_common import Terminated, _user_errors, resumable, stop_signals, terminated_by
from packer.errors import PackerError, ShardError


def _command(exc):
    @click.command()
    @_user_errors
    def cmd():
        raise exc

    return cmd


@pytest.mark.parametrize("exc,code,words", [
    (PackerError("input not found: x/"), 2, "packer: error: input not found: x/"),
    (ShardError("out/shards/000001.arrow: shard is corrupt"), 1, "000001.arrow: shard is corrupt"),
    (KeyboardInterrupt(), 130, "packer: interrupted"),
    (Terminated(signal.SIGTERM), 143, "packer: terminated"),
])
def test_mistakes_and_interrupts_are_one_line_and_their_exit_code(exc, code, words):
    res = CliRunner().invoke(_command(exc), [])
    assert res.exit_code == code and words in res.output and "Traceback" not in res.output


def test_a_terminated_run_is_told_from_ctrl_c_also_after_an_extension_turned_it_into_one():
    assert terminated_by(Terminated(signal.SIGHUP)) == signal.SIGHUP
    with stop_signals():
        assert terminated_by(KeyboardInterrupt()) is None  # Ctrl-C
        with pytest.raises(Terminated):
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # what the kernel's SIGTERM runs
        assert terminated_by(KeyboardInterrupt()) == signal.SIGTERM  # (ray.wait turns Terminated into this)


def test_the_callers_handlers_are_back_after_the_block():
    mine = signal.getsignal(signal.SIGTERM)
    with stop_signals():
        assert signal.getsignal(signal.SIGTERM) is not mine
    assert signal.getsignal(signal.SIGTERM) is mine


def test_a_resumable_block_says_how_to_resume_and_closes_its_bar(capsys, monkeypatch):
    closed = []
    bar = type("Bar", (), {"close": lambda self: closed.append(1)})()
    monkeypatch.setattr("sys.argv", ["packer", "repack", "a", "b", "--seq-len", "8", "--overwrite"])
    with pytest.raises(SystemExit) as e:
        with resumable(bar):
            raise KeyboardInterrupt
    assert e.value.code == 130 and closed
    err = capsys.readouterr().err
    assert "interrupted; finished units are kept" in err and "packer repack a b --seq-len 8 --resume" in err
