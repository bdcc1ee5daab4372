"""The backend check on input texts, run on a pool worker while the others start (packer/pipeline/backend_check.py).

No unit may be written before it passed; a difference it finds makes "auto" build again with HF
(same shards) and makes "tiktoken" stop with one line, nothing built."""

import os

import pytest

pytest.importorskip("tiktoken")

import packer.tokenize.tokenizer as T  # noqa: E402
from packer import build  # noqa: E402
from packer.errors import PackerError  # noqa: E402
from packer.tokenize import resolve_tokenizer  # noqa: E402
from packer.tokenize import tiktoken_backend as TE  # noqa: E402
from packer.tokenize.tiktoken_check import CheckResult  # noqa: E402
from tests.conftest import write_jsonl  # noqa: E402

TEXTS = [f"document {i}: the quick brown fox {'jumps ' * (i % 40)}over the lazy dog. café 日本 {i * 7919}"
         for i in range(1500)]


@pytest.fixture(autouse=True)
def _tiktoken_alone(monkeypatch):
    """These test tiktoken's own path: fastokens, where installed, would take auto's place
    (its tests: tests/tokenize/test_fastokens_backend.py)."""
    monkeypatch.setenv("PACKER_FASTOKENS", "off")


def _shards(out):
    d = os.path.join(out, "shards")
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


@pytest.fixture
def corpus(tmp_path):
    p = tmp_path / "c.jsonl"
    write_jsonl(p, TEXTS)
    return str(p)


def _fresh_process(tok):
    """What a new `packer build` process holds: the tokenizer on record, nothing parsed."""
    resolve_tokenizer(tok)  # (records it, if not yet)
    T._LOADED.clear()
    TE._STATIC.clear()
    TE._ENCODERS.clear()


def test_two_workers_check_on_a_worker_and_match_one(tmp_path, corpus, gpt2_path):
    build(corpus, str(tmp_path / "warm"), tokenizer=gpt2_path, seq_len=256, workers=1, quiet=True)  # records the check
    _fresh_process(gpt2_path)
    two = build(corpus, str(tmp_path / "two"), tokenizer=gpt2_path, seq_len=256, workers=2, unit_mb=0.05, quiet=True)
    assert T._LOADED == {}  # the main process never parsed the HF tokenizer: the worker checked
    one = build(corpus, str(tmp_path / "one"), tokenizer=gpt2_path, seq_len=256, workers=1, unit_mb=0.05, quiet=True)
    t2, t1 = two.manifest["tokenizer"], one.manifest["tokenizer"]
    assert t2["backend"] == t1["backend"] == "tiktoken"
    assert t2["backend_reason"] == t1["backend_reason"] and " input texts (" in t2["backend_reason"]
    assert len(_shards(str(tmp_path / "two"))) > 1
    assert _shards(str(tmp_path / "two")) == _shards(str(tmp_path / "one"))


def _differs(monkeypatch):
    bad = CheckResult(False, 1, 3, "input text 0 ('document 0'): token 1 differs (HF [1], tiktoken [2])")
    monkeypatch.setattr(TE, "run_input_check", lambda enc, hf, texts: bad)  # (forked workers have it too)


def test_a_difference_on_the_input_builds_again_with_hf(tmp_path, corpus, gpt2_path, monkeypatch):
    _fresh_process(gpt2_path)
    _differs(monkeypatch)
    r = build(corpus, str(tmp_path / "auto"), tokenizer=gpt2_path, seq_len=256, workers=2, unit_mb=0.05, quiet=True)
    tok = r.manifest["tokenizer"]
    assert tok["backend"] == "hf"
    assert tok["backend_reason"].startswith("tiktoken gave other ids than HF on input text 0")
    assert any(n.startswith("tokenizer backend: tiktoken gave other ids") for n in r.notes)
    hf = build(corpus, str(tmp_path / "hf"), tokenizer=gpt2_path, seq_len=256, workers=1, unit_mb=0.05, quiet=True,
               tokenizer_backend="hf")
    assert _shards(str(tmp_path / "auto")) == _shards(str(tmp_path / "hf"))
    assert r.manifest["totals"] == hf.manifest["totals"]


def test_forced_tiktoken_that_differs_stops_with_nothing_written(tmp_path, corpus, gpt2_path, monkeypatch):
    _fresh_process(gpt2_path)
    _differs(monkeypatch)
    out = tmp_path / "tk"
    with pytest.raises(PackerError, match=r"--tokenizer-backend tiktoken: tiktoken gave other ids .*nothing was built"):
        build(corpus, str(out), tokenizer=gpt2_path, seq_len=256, workers=2, unit_mb=0.05, quiet=True,
              tokenizer_backend="tiktoken")
    assert not os.path.exists(out / "shards") or os.listdir(out / "shards") == []
    assert not os.path.exists(out / "manifest.json")


def test_resume_with_every_unit_done_still_says_why_tiktoken(tmp_path, corpus, gpt2_path):
    out = str(tmp_path / "o")
    first = build(corpus, out, tokenizer=gpt2_path, seq_len=256, workers=2, unit_mb=0.05, quiet=True)
    os.remove(os.path.join(out, "manifest.json"))  # killed after its last unit, before the manifest
    _fresh_process(gpt2_path)
    again = build(corpus, out, tokenizer=gpt2_path, seq_len=256, workers=2, unit_mb=0.05, quiet=True, resume=True)
    assert again.units_run == 0
    assert again.manifest["tokenizer"]["backend_reason"] == first.manifest["tokenizer"]["backend_reason"]


# --- The record of a passed input check (backend_check.InputRecord) ---------------------------------------


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Calls of the input check and of the HF parse for it, counted in a file (forked workers count too)."""
    import packer.pipeline.backend_check as BC

    log = tmp_path / "calls.log"
    check, parse = TE.run_input_check, BC.loaded_hf

    def counting(name, fn):
        def wrapped(*a, **k):
            with open(log, "a") as f:
                f.write(name + "\n")
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(TE, "run_input_check", counting("check", check))
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
        assert calls == [] and T._LOADED == {}
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
    from packer.pipeline.backend_check import InputRecord, sample_slices

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

    import packer.tokenize.check_cache as CC

    monkeypatch.setattr(CC, "tempfile", types.SimpleNamespace(mkstemp=full))  # a full disk, for the records alone
    for _ in range(2):
        r, calls = _run(corpus, tmp_path / "o2", gpt2_path, counted)
        assert calls == ["check", "parse"] and r.manifest["tokenizer"] == runs[0][0].manifest["tokenizer"]
    assert not (tmp_path / "full" / "input-checks").exists() or not list((tmp_path / "full" / "input-checks").iterdir())
    assert _shards(str(tmp_path / "o2")) == _shards(str(tmp_path / "o"))
