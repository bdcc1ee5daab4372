"""The ``packer`` command's entry point (``[project.scripts]``: ``packer._entry:main``; ``python -m packer``).

Loading packer's command (pyarrow, numpy, the tokenizers) takes a good part
of a second; a Ctrl-C in that time used to print Python's traceback of
whatever import it interrupted. This module, and ``import packer`` before it
(packer/__init__.py imports its names on first use: errors.py alone, no
numpy), import nothing heavy, so the interrupt can be caught around the
import of packer.cli and told in one line, exit 130, as packer.cli tells one
during a build.

Output streams that cannot be written are told the same way, for every
command: standard output closed at start (``>&-``) is refused before anything
runs (standard error closed, ``2>&-``: exit 2 with nothing said, nowhere to say it), and a write that fails (``> /dev/full``: ENOSPC; a quota; an I/O error)
ends the command with one line on stderr and exit 2, not a traceback. A
reader that went away (``| head``) stays a quiet exit 0 (packer.cli).
"""

import os
import signal
import sys

OUTPUT_CODE = 2  # as a PackerError: the command could not do what was asked


def main():
    if sys.stderr is None:  # fd 2 closed (2>&-): no error could be told, so nothing runs
        sys.exit(OUTPUT_CODE)
    if sys.stdout is None:  # fd 1 was closed when the interpreter started
        _say("packer: error: standard output is closed (>&-): nothing could be printed; "
             "redirect it to a file or to /dev/null instead")
        sys.exit(OUTPUT_CODE)
    cli_run = _load()
    try:
        cli_run()
    except OSError as e:
        stream = failed_stream(e)
        if stream is None:
            raise
        _say(f"packer: error: cannot write to standard {stream}: {e.strerror or e}")
        os._exit(OUTPUT_CODE)  # no interpreter flush of what could not be written


def _load():
    """packer.cli's ``run``, imported; a Ctrl-C meanwhile is one line and exit 130. An extension module
    interrupted while it loads may raise ImportError instead (numpy's does): told the same way."""
    interrupted = []

    def on_interrupt(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # (an inherited SIG_IGN stays)
        signal.signal(signal.SIGINT, on_interrupt)
    try:
        from .head_start import begin

        begin(sys.argv[1:])  # a build's fast encoder loads in a thread while packer.cli is imported
        from .cli import run
        return run
    except BaseException:
        if not interrupted:
            raise
        sys.stderr.write("\npacker: interrupted\n")
        sys.exit(130)
    finally:
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)


def failed_stream(e: BaseException) -> "str | None":
    """"output" or "error" when ``e`` was raised writing to stdout or stderr (click.echo's write or
    flush), else None."""
    tb = e.__traceback__
    name = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "echo" and os.path.join("click", "utils.py") in frame.f_code.co_filename:
            name = _stream_name(frame.f_locals.get("file"))
        tb = tb.tb_next
    return name


def _stream_name(file) -> "str | None":
    try:
        fd = file.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return {1: "output", 2: "error"}.get(fd)


def _say(line: str) -> None:
    """One line on stderr, if stderr can take it."""
    try:
        if sys.stderr is not None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
    except (OSError, ValueError):
        pass

