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


def _zst(path, texts) -> str:
    import io as _io
    import json as _json

    import zstandard

    raw = "".join(_json.dumps({"text": t}) + "\n" for t in texts).encode()
    path.write_bytes(zstandard.ZstdCompressor(level=19).compress(raw))
    return str(path), len(raw)


def test_text_bytes_measures_a_compressed_input_as_decompressed(tmp_path):
    """Issue 52.3: the size the encoder sees, not the bytes on disk: a .jsonl.zst of 40x expansion counts
    about its decompressed size; plain files count their size; nothing is read where the disk size is enough."""
    from packer.formats import discover, plan_slices
    from packer.pipeline.backend_check import text_bytes

    zst, raw = _zst(tmp_path / "a.jsonl.zst", [f"doc {i % 50}: " + "the same words again " * 200 for i in range(400)])
    write_jsonl(tmp_path / "b.jsonl", TEXTS[:100])
    slices = [s for s, _ in plan_slices(discover([zst, str(tmp_path / "b.jsonl")]).files, 1 << 30)]
    disk = os.path.getsize(zst) + os.path.getsize(tmp_path / "b.jsonl")
    got, how = text_bytes(slices)
    assert os.path.getsize(zst) * 20 < raw  # the shape of the input: far more text than bytes
    assert 0.5 * raw < got - os.path.getsize(tmp_path / "b.jsonl") < 1.5 * raw, (got, raw)
    assert "zstd" in how and f"{disk:,} on disk" in how
    assert text_bytes(slices, enough=disk) == (disk, f"{disk:,} on disk, no less decompressed")


def test_auto_takes_the_encoder_a_compressed_inputs_text_calls_for(tmp_path, small_family, monkeypatch):
    """Issue 52.3: a .jsonl.zst under OVER_TIKTOKEN times the tokenizer.json on disk but far over it
    decompressed gets fastokens under auto (by its size on disk it got tiktoken), its reason says the
    size that chose; the shards are those of tiktoken forced."""
    pytest.importorskip("fastokens")
    monkeypatch.delenv("PACKER_FASTOKENS", raising=False)
    tok = os.path.join(small_family("gpt2-like"), "tokenizer.json")
    limit = os.path.getsize(tok) * 3
    zst, raw = _zst(tmp_path / "c.jsonl.zst", [f"doc {i}: " + "the quick brown fox jumps " * 40 for i in range(600)])
    assert os.path.getsize(zst) < limit < raw
    auto = build(zst, str(tmp_path / "auto"), tokenizer=tok, seq_len=256, workers=1, quiet=True)
    t = auto.manifest["tokenizer"]
    assert t["backend"] == "fastokens", t["backend_reason"]
    assert "bytes of text" in t["backend_reason"] and "zstd" in t["backend_reason"]
    tk = build(zst, str(tmp_path / "tk"), tokenizer=tok, seq_len=256, workers=1, quiet=True, tokenizer_backend="tiktoken")
    assert tk.manifest["tokenizer"]["backend"] == "tiktoken"
    assert _shards(str(tmp_path / "auto")) == _shards(str(tmp_path / "tk"))


def test_fastokens_forced_by_name_runs_or_stops_in_one_line(tmp_path, corpus, small_family, monkeypatch):
    """Issue 52.3: --tokenizer-backend names every encoder: fastokens forced runs on an input far under the
    size where auto would load it (same shards as HF), and says it was asked for; where it cannot run
    (PACKER_FASTOKENS=off) the build stops in one line, nothing built."""
    pytest.importorskip("fastokens")
    monkeypatch.delenv("PACKER_FASTOKENS", raising=False)
    tok = os.path.join(small_family("gpt2-like"), "tokenizer.json")
    small = tmp_path / "s.jsonl"
    write_jsonl(small, TEXTS[:20])
    fast = build(str(small), str(tmp_path / "f"), tokenizer=tok, seq_len=256, workers=1, quiet=True,
                 tokenizer_backend="fastokens")
    t = fast.manifest["tokenizer"]
    assert t["backend"] == "fastokens" and t["backend_reason"].startswith("asked for (--tokenizer-backend fastokens)")
    hf = build(str(small), str(tmp_path / "h"), tokenizer=tok, seq_len=256, workers=1, quiet=True, tokenizer_backend="hf")
    assert _shards(str(tmp_path / "f")) == _shards(str(tmp_path / "h"))
    assert hf.manifest["tokenizer"]["backend_reason"] == "asked for (--tokenizer-backend hf)"  # said once
    monkeypatch.setenv("PACKER_FASTOKENS", "off")
    forget_parsed()
    with pytest.raises(PackerError, match=r"^--tokenizer-backend fastokens: PACKER_FASTOKENS=off; nothing was built"):
        build(str(small), str(tmp_path / "off"), tokenizer=tok, seq_len=256, workers=1, quiet=True,
              tokenizer_backend="fastokens")
    assert not os.path.exists(tmp_path / "off" / "manifest.json")
