"""The record of a passed input check (packer/tokenize/backend/input_check.py: InputRecord), through whole
builds: a rebuild or --resume over unchanged inputs neither checks nor parses HF for it, a changed input,
tokenizer or encoder checks again, a damaged record or an unwritable cache folder means check again."""

import os

import pytest

pytest.importorskip("tiktoken")

from packer import build  # noqa: E402
from packer.tokenize import backend, parsed_hf, resolve_tokenizer  # noqa: E402
from tests.conftest import write_jsonl  # noqa: E402
from tests.pipeline.test_backend_check import TEXTS, _fresh_process, _shards, _tiktoken_alone, corpus  # noqa: E402,F401


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Calls of the input check and of the HF parse for it, counted in a file (forked workers count too)."""
    import packer.pipeline.backend_check as BC

    log = tmp_path / "calls.log"
    check, parse = backend.run_input_check, BC.loaded_hf

    def counting(name, fn):
        def wrapped(*a, **k):
            with open(log, "a") as f:
                f.write(name + "\n")
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(backend, "run_input_check", counting("check", check))
    monkeypatch.setattr(BC, "loaded_hf", counting("parse", parse))
    return lambda: sorted(log.read_text().split()) if log.exists() and log.stat().st_size else []


def _run(corpus, out, tok, counted, **kw):
    """A build in a new process's state; the input checks and HF parses it ran, then clears the count."""
    _fresh_process(tok)
    r = build(corpus, str(out), tokenizer=tok, seq_len=256, unit_mb=0.05, quiet=True,
              **{"workers": 1, "overwrite": not kw.get("resume"), **kw})
    calls = counted()
    log = os.path.join(os.path.dirname(str(out)), "calls.log")
    if os.path.exists(log):
        os.remove(log)
    return r, calls


def test_a_rebuild_over_unchanged_inputs_skips_the_check_and_parses_no_hf(tmp_path, corpus, gpt2_path, counted,
                                                                         monkeypatch):
    first, calls = _run(corpus, tmp_path / "a", gpt2_path, counted)
    assert calls == ["check", "parse"]
    for workers in (1, 2):  # in this process, and as a pool (no check left to a worker either)
        again, calls = _run(corpus, tmp_path / "a", gpt2_path, counted, workers=workers)
        assert calls == [] and parsed_hf() == 0
        assert again.manifest["tokenizer"] == first.manifest["tokenizer"]  # the same reason, to the byte
    os.remove(tmp_path / "a" / "manifest.json")  # killed after its first units
    units = sorted(os.listdir(tmp_path / "a" / "units"))
    os.remove(tmp_path / "a" / "units" / units[-1])
    resumed, calls = _run(corpus, tmp_path / "a", gpt2_path, counted, resume=True, workers=2)
    assert calls == [] and resumed.units_run == 1 and resumed.manifest["tokenizer"] == first.manifest["tokenizer"]
    monkeypatch.setenv("PACKER_CACHE", "off")  # no record: the check runs, and the bytes are the same
    plain, calls = _run(corpus, tmp_path / "off", gpt2_path, counted)
    assert calls == ["check", "parse"]
    assert _shards(str(tmp_path / "off")) == _shards(str(tmp_path / "a"))
    assert open(tmp_path / "off" / "manifest.json", "rb").read() == open(tmp_path / "a" / "manifest.json", "rb").read()


def test_a_changed_input_or_tokenizer_setting_checks_again(tmp_path, corpus, gpt2_path, counted):
    _run(corpus, tmp_path / "o", gpt2_path, counted)
    write_jsonl(corpus, TEXTS[:-1] + ["a changed last document"])  # new content, new stamp
    assert _run(corpus, tmp_path / "o", gpt2_path, counted)[1] == ["check", "parse"]
    assert _run(corpus, tmp_path / "o", gpt2_path, counted)[1] == []
    again = _run(corpus, tmp_path / "o", gpt2_path, counted, split_special_tokens=True)[1]
    assert again == ["check", "parse"]  # the tokenizer as used changed


def test_the_key_covers_tokenizer_encoder_and_stamps(tmp_path, corpus, gpt2_path):
    from dataclasses import replace

    from packer.formats import discover, plan_slices
    from packer.tokenize.backend.input_check import InputRecord, sample_slices

    tok = resolve_tokenizer(gpt2_path)
    ordered = sample_slices([s for s, _ in plan_slices(discover([corpus]).files, 50_000)])
    key = InputRecord(tok, "tiktoken", ordered, "text").key
    assert key is not None and key == InputRecord(tok, "tiktoken", ordered, "text").key
    others = [InputRecord(replace(tok, fingerprint="0" * 64), "tiktoken", ordered, "text"),
              InputRecord(tok, "fastokens", ordered, "text"), InputRecord(tok, "tiktoken", ordered, "body"),
              InputRecord(tok, "tiktoken", ordered[:-1], "text")]
    assert len({key} | {r.key for r in others}) == 5
    f = ordered[0].file
    for stamp in [(f.stamp[0] + 1, *f.stamp[1:]), (*f.stamp[:2], "0" * 32)]:
        moved = [replace(s, file=replace(s.file, stamp=stamp)) if s.file == f else s for s in ordered]
        assert InputRecord(tok, "tiktoken", moved, "text").key not in (None, key)
    blind = [replace(s, file=replace(s.file, stamp=(*f.stamp[:2], ""))) for s in ordered]
    assert InputRecord(tok, "tiktoken", blind, "text").key is None  # no content stamp: never on record


def test_a_damaged_record_means_check_again(tmp_path, corpus, gpt2_path, counted, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PACKER_CACHE", str(cache))
    first = _run(corpus, tmp_path / "o", gpt2_path, counted)[0]
    (rec,) = (cache / "input-checks").iterdir()
    for damage in [b"{not json", b"", b'{"texts": "62", "tokens": 1}', b'{"texts": -1, "tokens": 1}', b"[1, 2]",
                   b'{"texts": true, "tokens": 1}', b'\xff\xfe']:
        rec.write_bytes(damage)
        r, calls = _run(corpus, tmp_path / "o", gpt2_path, counted)
        assert calls == ["check", "parse"] and r.manifest["tokenizer"] == first.manifest["tokenizer"]
    assert _run(corpus, tmp_path / "o", gpt2_path, counted)[1] == []  # the last check wrote it back whole


def test_an_unwritable_cache_checks_every_time(tmp_path, corpus, gpt2_path, counted, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "a-file" / "cache"))  # read-only HOME, or the like
    runs = [_run(corpus, tmp_path / "o", gpt2_path, counted) for _ in range(2)]
    assert [c for _, c in runs] == [["check", "parse"]] * 2
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "full"))

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    import types

    import packer.tokenize.backend.check_cache as CC

    monkeypatch.setattr(CC, "tempfile", types.SimpleNamespace(mkstemp=full))  # a full disk, for the records alone
    for _ in range(2):
        r, calls = _run(corpus, tmp_path / "o2", gpt2_path, counted)
        assert calls == ["check", "parse"] and r.manifest["tokenizer"] == runs[0][0].manifest["tokenizer"]
    assert not (tmp_path / "full" / "input-checks").exists() or not list((tmp_path / "full" / "input-checks").iterdir())
    assert _shards(str(tmp_path / "o2")) == _shards(str(tmp_path / "o"))
