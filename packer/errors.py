"""Errors that reach the user as one line.

Raise ``PackerError`` for anything the user can fix (a missing input, a bad
flag, a damaged shard): the CLI prints its message on one line with no
traceback and exits with ``exit_code``.

A message names an option by its flag (``--resume``); ``build()`` called from
Python names it by its keyword instead (``resume=True``), unless the CLI is the
caller (``flag_spelling``).
"""

import contextlib
import contextvars

_FLAGS = contextvars.ContextVar("packer_flag_spelling", default=False)


@contextlib.contextmanager
def flag_spelling():
    """Within it, errors keep the CLI's flag names (the CLI calls ``build()`` inside it)."""
    token = _FLAGS.set(True)
    try:
        yield
    finally:
        _FLAGS.reset(token)


def says_flags() -> bool:
    """Whether the caller reads options as flags (the CLI) rather than keywords (Python)."""
    return _FLAGS.get()


class PackerError(Exception):
    """A user-facing error; ``str(err)`` is the whole message."""

    exit_code = 2


class InputError(PackerError):
    """A bad record met under ``--strict``; names the file and line."""

    exit_code = 1


class ShardError(PackerError):
    """A shard or manifest that fails validation; names the file."""

    exit_code = 1


class NotABuild(ShardError):
    """A folder that holds no packer build at all: the user named the wrong one (exit 2, not damage)."""

    exit_code = 2
