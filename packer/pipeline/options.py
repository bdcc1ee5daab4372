"""A build option declared once: the settings field carries its flag, help and default.

``OutputSettings`` and ``RunSettings`` (config.py) declare each field with
``option(...)``; ``options_of`` reads them back as ``Option`` records, from
which the ``packer build`` command (cli.py) makes its click options and
``build()`` (steps.py) its keyword signature. A new option is one field plus
its use (docs/architecture.md, "Adding an option").
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field, fields

from ..errors import PackerError, says_flags

_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def option(default, help: str, *, flag: str | None = None, short: str | None = None, name: str | None = None,
           choices: tuple | None = None, metavar: str | None = None, show_default=None, given=None, convert=None):
    """A settings field that is also an option of ``packer build`` and a keyword of ``build()``.

    ``flag``: ``--`` and the field's name with dashes unless given; ``name`` (the keyword, and the
    CLI's parameter): the field's name, or the flag's for a converted option. ``given`` and ``convert``:
    an option given in other terms than the field holds (MB for bytes, ``--no-eos`` for ``eos``), its
    default as given and ``convert(value, flag)`` to the field's value. ``show_default``: as click's
    (default: shown unless None or a flag)."""
    meta = dict(help=help, flag=flag, short=short, name=name, choices=choices, metavar=metavar,
                show_default=show_default, given=given, convert=convert)
    return field(default=default, metadata=meta)


def _mb(value, flag: str) -> int:
    try:
        return int(float(value) * (1 << 20))
    except (TypeError, ValueError, OverflowError):
        raise PackerError(f"{flag} must be a number of MB (got {value!r})") from None


def mb_option(default_bytes: int, help: str, flag: str):
    """A byte count given in MB (``--unit-mb 0.5``: 524,288 bytes)."""
    return option(default_bytes, help, flag=flag, given=default_bytes / (1 << 20), convert=_mb)


def _not(value, flag: str) -> bool:
    return not value


def off_option(help: str, flag: str):
    """A setting on by default that a flag turns off (``--no-eos``: ``eos=False``)."""
    return option(True, help, flag=flag, given=False, convert=_not)


@dataclass(frozen=True)
class Option:
    """One option of ``packer build`` and ``build()``, as its settings field declares it."""

    name: str  # build()'s keyword and the CLI's parameter: seq_len, unit_mb, no_eos, bos_token
    field: str  # the settings field it sets: seq_len, unit_bytes, eos, bos_token
    half: str  # "output" (OutputSettings) or "run" (RunSettings)
    flag: str  # --seq-len
    short: str | None  # -q
    default: object  # as given: 64.0 (MB) for --unit-mb, False for --no-eos
    type: type  # int, float, str, or bool (a flag)
    help: str
    choices: tuple | None
    metavar: str | None
    show_default: object
    convert: object = None  # convert(given, flag) -> the field's value; None: the value as given

    def value(self, given):
        """The field's value for ``given`` (``--unit-mb 0.5``: 524288); ``PackerError`` in one line naming the
        option where ``given`` is not of its type (``build(seq_len="2048")``: the CLI's click has converted)."""
        if self.convert is not None:
            return self.convert(given, self.flag)
        if given is None and self.default is None:
            return None
        return _typed(given, self.type, self.flag)


def _typed(given, typ: type, flag: str):
    """``given`` as an option of type ``typ`` holds it: an integral number (NumPy's too) as an int, a path as a
    str; what is not of the type raises ``PackerError``. A bool is no number here (``seq_len=True``)."""
    import numbers
    import os

    import numpy as np

    if typ is bool and isinstance(given, (bool, np.bool_)):
        return bool(given)
    if typ is int and isinstance(given, numbers.Integral) and not isinstance(given, bool):
        return int(given)
    if typ is float and isinstance(given, numbers.Real) and not isinstance(given, bool):
        return given if type(given) in (int, float) else float(given)  # np.float32 is no JSON number
    if typ is str and isinstance(given, (str, os.PathLike)):
        return os.fspath(given)
    want = {int: "a whole number", float: "a number", str: "a string", bool: "True or False"}[typ]
    raise PackerError(f"{flag} must be {want} (got {given!r}: {type(given).__name__})")


def options_of(cls, half: str) -> tuple[Option, ...]:
    """The options a settings class declares, in its field order (the order of ``--help``)."""
    out = []
    for f in fields(cls):
        m = f.metadata
        if "help" not in m:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with option(...)")
        flag = m["flag"] or "--" + f.name.replace("_", "-")
        default = f.default if m["convert"] is None else m["given"]
        typ = _TYPES[str(f.type).split("|")[0].strip()] if default is None else type(default)
        show = m["show_default"] if m["show_default"] is not None else default is not None and typ is not bool
        name = m["name"] or (flag[2:].replace("-", "_") if m["convert"] else f.name)
        out.append(Option(name, f.name, half, flag, m["short"], default, typ, m["help"], m["choices"], m["metavar"], show,
                          m["convert"]))
    return tuple(out)


def signature(fn, options: tuple[Option, ...]) -> inspect.Signature:
    """``fn``'s signature with its ``**options`` replaced by one keyword per option (typed, with its
    default): what ``help(build)``, IPython and Jupyter complete."""
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD]
    for o in options:
        ann = o.type if o.default is not None else o.type | None
        params.append(inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=ann))
    return inspect.Signature(params, return_annotation=inspect.signature(fn).return_annotation)


_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def python_spelling(message: str, options: tuple[Option, ...]) -> str:
    """``message`` as a caller of ``build()`` passes the switches: a flag that takes no value as its
    keyword set to True (``--resume``: ``resume=True``, ``--no-eos``: ``no_eos=True``). An option with a
    value keeps its flag, as validation names it (``--seq-len must be at least 2``: the same words as the
    CLI's), and a command quoted in backticks (`packer repack ...`) keeps its flags."""
    by_flag = {o.flag: o for o in options if o.type is bool}

    def spelled(part: str) -> str:
        def name(m: re.Match) -> str:
            o = by_flag.get(m.group(0))
            if o is None:
                return m.group(0)
            # "--overwrite must be True or False": about the option, not the switch passed: named as validation
            # names every option by its type (--seq-len must be a whole number)
            return m.group(0) if part[m.end():].startswith(" must ") else f"{o.name}=True"

        return _FLAG.sub(name, part)

    parts = message.split("`")
    return "`".join(spelled(p) if i % 2 == 0 else p for i, p in enumerate(parts))


def in_python_terms(e: Exception, options: tuple[Option, ...]) -> None:
    """Reword the error ``e`` (a PackerError) in place for a Python caller (nothing when the CLI called)."""
    if not says_flags() and e.args and isinstance(e.args[0], str):
        e.args = (python_spelling(e.args[0], options),) + e.args[1:]
