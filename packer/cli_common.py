"""What every ``packer`` command shares: one line for a user's mistake, Ctrl-C and SIGTERM as exit codes."""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import sys

import click

from .errors import PackerError


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill PID, docker stop, systemd, Slurm preemption) or SIGHUP (the terminal closed),
    handled as Ctrl-C is: workers stopped, finished units kept, the resume command printed."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = int(signum)


_TERMINATED: list[int] = []  # the signals ``_on_sigterm`` took (no lock in a handler)


class StopExit(SystemExit):
    """The exit after Ctrl-C, SIGTERM or SIGHUP stopped a command: its process ends at once (packer.cli.run),
    a Ray driver's too, whose build left its Ray to the watchdog (``build(exit_on_stop=True)``)."""


def _on_sigterm(signum, frame):
    _TERMINATED.append(int(signum))
    raise Terminated(signum)


def terminated_by(e: KeyboardInterrupt) -> int | None:
    """The signal that ended a run in ``e``: its own, or one ``_on_sigterm`` took while a C extension turned
    the Terminated it raised into a plain KeyboardInterrupt (Ray's ``ray.wait`` and ``ray.get`` do); None
    for Ctrl-C."""
    if isinstance(e, Terminated):
        return e.signum
    return _TERMINATED[-1] if _TERMINATED else None


@contextlib.contextmanager
def stop_signals():
    """While the block runs, SIGTERM and SIGHUP (the terminal or the ssh session closed) stop it as Ctrl-C
    does (``Terminated``); the caller's own handlers are put back after it (a program that called us
    in-process keeps its own). Not on another thread than the main one: signals are left alone there."""
    _TERMINATED.clear()
    try:
        old = {s: signal.signal(s, _on_sigterm) for s in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:
        old = {}
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def resumable(bar=None):
    """The block (a build, a repack) stops on Ctrl-C, SIGTERM or SIGHUP with one line and the command that
    resumes it (``resume_exit``); ``bar``, a progress bar, is closed first, and in any case after."""
    try:
        with stop_signals():
            yield
    except KeyboardInterrupt as e:
        if bar:
            bar.close()
        resume_exit(e)
    finally:
        if bar:
            bar.close()


def resume_exit(e: KeyboardInterrupt, what: str = "units") -> None:
    """After Ctrl-C or SIGTERM: one line saying so and the command that resumes; exit 130 or 128 + signal."""
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:] if a not in ("--overwrite", "--resume"))
    signum = terminated_by(e)
    how = f"terminated ({signal.Signals(signum).name})" if signum else "interrupted"
    click.echo(f"\npacker: {how}; finished {what} are kept. Resume with:\n  packer {argv} --resume", err=True)
    raise StopExit(128 + signum if signum else 130)


def _user_errors(fn):
    """Turn PackerError into one line on stderr and its exit code; Ctrl-C into 130;
    a closed stdout (``| head``) into a quiet exit 0."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PackerError as e:
            click.echo(f"packer: error: {e}", err=True)
            sys.exit(e.exit_code)
        except BrokenPipeError:
            # The reader of stdout went away: what it wanted, it has. Point stdout
            # at /dev/null so the interpreter's last flush does not fail again.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except MemoryError:
            click.echo("packer: error: out of memory; lower --workers, --unit-mb or --seq-len", err=True)
            sys.exit(1)
        except KeyboardInterrupt as e:
            click.echo(f"\npacker: {'terminated' if isinstance(e, Terminated) else 'interrupted'}", err=True)
            raise StopExit(128 + e.signum if isinstance(e, Terminated) else 130) from None

    return wrapper


def _build_at(out: str):
    """The storage of build OUT; one line (``PackerError``) when it is a local path that is not a folder."""
    from .io import storage_for

    store = storage_for(out)
    if store.missing_folder():
        raise PackerError(f"no such build folder: {out}")
    return store
