"""pipeline/options.py: each build option declared once, on its settings field."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields

import pytest

from packer.errors import PackerError
from packer.formats import DEFAULT_MAX_RECORD
from packer.pipeline import OPTIONS, DEFAULT_UNIT_BYTES, OutputSettings, RunSettings
from packer.pipeline.options import option, options_of, signature


def test_every_settings_field_is_one_option_with_its_own_name_and_flag():
    assert [o.field for o in OPTIONS] == [f.name for c in (OutputSettings, RunSettings) for f in fields(c)]
    assert len({o.name for o in OPTIONS}) == len({o.flag for o in OPTIONS}) == len(OPTIONS)
    assert all(o.help and o.flag.startswith("--") for o in OPTIONS)


def test_a_field_without_option_is_refused_where_it_is_declared():
    @dataclass(frozen=True)
    class Settings:
        seq_len: int = option(2048, "Tokens per packed row.")
        forgotten: int = 3

    with pytest.raises(TypeError, match="Settings.forgotten is not declared with option"):
        options_of(Settings, "output")


def test_each_default_as_given_is_the_fields_default():
    """The CLI's default and build()'s are the default of the field (64.0 MB is 64 MiB, --no-eos off is eos)."""
    for o in OPTIONS:
        cls = OutputSettings if o.half == "output" else RunSettings
        assert o.value(o.default) == getattr(cls(), o.field), o.name


def test_the_cli_spellings_convert_to_the_fields():
    by = {o.name: o for o in OPTIONS}
    assert (by["unit_mb"].field, by["unit_mb"].value(0.5)) == ("unit_bytes", 1 << 19)
    assert (by["max_record_mb"].field, by["max_record_mb"].value(256.0)) == ("max_record_bytes", DEFAULT_MAX_RECORD)
    assert (by["no_eos"].field, by["no_eos"].value(True)) == ("eos", False)
    assert (by["no_bos"].field, by["no_bos"].value(True)) == ("bos", False)
    assert (by["bos_token"].flag, by["quiet"].short) == ("--bos", "-q")
    assert by["unit_mb"].default == DEFAULT_UNIT_BYTES / (1 << 20) and by["unit_mb"].type is float
    with pytest.raises(PackerError, match=r"^--unit-mb must be a number of MB \(got 'abc'\)$"):
        by["unit_mb"].value("abc")


def test_signature_has_one_typed_keyword_per_option():
    def fn(inputs, out=None, *, progress=None, **options) -> int:
        return 0

    sig = signature(fn, OPTIONS)
    params = list(sig.parameters.values())
    assert [p.name for p in params] == ["inputs", "out", "progress", *(o.name for o in OPTIONS)]
    seq, tok = sig.parameters["seq_len"], sig.parameters["tokenizer"]
    assert (seq.kind, seq.default, seq.annotation) == (inspect.Parameter.KEYWORD_ONLY, 2048, int)
    assert tok.annotation == (str | None) and sig.return_annotation == "int"  # (as written: annotations are strings)
