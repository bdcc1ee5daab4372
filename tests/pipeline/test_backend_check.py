"""The backend check on input texts, run on a pool worker while the others start (packer/pipeline/backend_check.py).

No unit may be written before it passed; a difference it finds makes "auto" build again with HF
(same shards) and makes "tiktoken" stop with one line, nothing built."""

import os

import pytest

pytest.importorskip("tiktoken")

from packer import build  # noqa: E402
from packer.errors import PackerError  # noqa: E402
from packer.tokenize import backend, forget_parsed, parsed_hf, resolve_tokenizer  # noqa: E402
from packer.tokenize.backend import CheckResult  # noqa: E402
from tests.conftest import write_jsonl  # noqa: E402

TEXTS = [f"document {i}: the quick brown fox {'jumps ' * (i % 40)}over the lazy dog. café 日本 {i * 7919}"
         for i in range(1500)]


@pytest.fixture(autouse=True)
def _tiktoken_alone(monkeypatch):
    """These test tiktoken's own path: fastokens, where installed, would take auto's place
    (its tests: tests/tokenize/backend/test_fastokens_backend.py)."""
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
    forget_parsed()


def test_two_workers_check_on_a_worker_and_match_one(tmp_path, corpus, gpt2_path):
    build(corpus, str(tmp_path / "warm"), tokenizer=gpt2_path, seq_len=256, workers=1, quiet=True)  # records the check
    _fresh_process(gpt2_path)
    two = build(corpus, str(tmp_path / "two"), tokenizer=gpt2_path, seq_len=256, workers=2, unit_mb=0.05, quiet=True)
    assert parsed_hf() == 0  # the main process never parsed the HF tokenizer: the worker checked
    one = build(corpus, str(tmp_path / "one"), tokenizer=gpt2_path, seq_len=256, workers=1, unit_mb=0.05, quiet=True)
    t2, t1 = two.manifest["tokenizer"], one.manifest["tokenizer"]
    assert t2["backend"] == t1["backend"] == "tiktoken"
    assert t2["backend_reason"] == t1["backend_reason"] and " input texts (" in t2["backend_reason"]
    assert len(_shards(str(tmp_path / "two"))) > 1
    assert _shards(str(tmp_path / "two")) == _shards(str(tmp_path / "one"))


def _differs(monkeypatch):
    bad = CheckResult(False, 1, 3, "input text 0 ('document 0'): token 1 differs (HF [1], tiktoken [2])")
    monkeypatch.setattr(backend, "run_input_check", lambda enc, hf, texts: bad)  # (forked workers have it too)


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
