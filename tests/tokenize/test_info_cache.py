"""The record of resolved tokenizers (packer/tokenize/info_cache.py): read back only for the same bytes and options."""

import json
import os

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

import packer.tokenize.tokenizer as T
from packer.tokenize import info_cache, resolve_tokenizer


def _tokenizer_file(path, bos_template=True) -> str:
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2, "a": 3, "b": 4, "ab": 5}
    tok = Tokenizer(models.BPE(vocab, [("a", "b")], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<s>", "</s>", "<unk>"])
    if bos_template:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(path))
    return str(path)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tokenizers"


def _records(cache) -> list[str]:
    """The record files (each has its tokenizer JSON beside it, NAME.tokenizer.json)."""
    names = [n for n in os.listdir(cache) if not n.endswith(".as_used.json")]  # (the tokenizer as used: below)
    recs = sorted(n for n in names if not n.endswith(".tokenizer.json"))
    assert sorted(n for n in names if n.endswith(".tokenizer.json")) == sorted(n[:-5] + ".tokenizer.json" for n in recs)
    return recs


def _no_parse(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("parsed again")
    monkeypatch.setattr(T, "_resolve_hf", fail)


def test_second_resolve_reads_the_record_and_equals_a_fresh_one(tmp_path, cache, monkeypatch):
    path = _tokenizer_file(tmp_path / "tok.json")
    first = resolve_tokenizer(path)
    assert len(_records(cache)) == 1
    fresh = T._resolve_hf(path, True, None, True, None, False)
    _no_parse(monkeypatch)
    again = resolve_tokenizer(path)
    assert again == first == fresh
    assert again.prefix == (0,) and again.after == (1,) and isinstance(again.specials, tuple)
    # The Encoder works from the record alone (it parses the JSON it holds).
    T._LOADED.clear()
    ids = T.Encoder(again).encode_batch(["ab a"])[0].tolist()
    assert ids == [0, 5, 3, 1]


def test_other_bytes_or_options_are_other_records(tmp_path, cache, monkeypatch):
    path = _tokenizer_file(tmp_path / "tok.json")
    with_bos = resolve_tokenizer(path)
    no_bos = resolve_tokenizer(path, bos=False)
    assert with_bos.prefix == (0,) and no_bos.prefix == ()
    assert len(_records(cache)) == 2
    _tokenizer_file(tmp_path / "tok.json", bos_template=False)  # the same path, new bytes
    changed = resolve_tokenizer(path)
    assert changed.prefix == () and changed.fingerprint != with_bos.fingerprint
    assert len(_records(cache)) == 3


@pytest.mark.parametrize("damage", [
    lambda rec: "{not json",
    lambda rec: json.dumps({k: v for k, v in rec.items() if k != "vocab_size"}),
    lambda rec: json.dumps(rec | {"vocab_size": "6"}),
    lambda rec: json.dumps(rec | {"eos_id": True}),
    lambda rec: json.dumps(rec | {"extra": 1}),
])
def test_a_damaged_record_is_ignored(tmp_path, cache, damage):
    path = _tokenizer_file(tmp_path / "tok.json")
    good = resolve_tokenizer(path)
    (name,) = _records(cache)
    rec = json.loads((cache / name).read_text())
    (cache / name).write_text(damage(rec))
    assert resolve_tokenizer(path) == good  # resolved again, and recorded again
    assert json.loads((cache / name).read_text()) == rec


@pytest.mark.parametrize("damage", [
    lambda p: p.unlink(),
    lambda p: p.write_text(p.read_text()[:-10]),  # cut short
    lambda p: p.write_bytes(b"\xff" + p.read_bytes()[1:]),  # not UTF-8
])
def test_a_missing_or_damaged_tokenizer_json_beside_the_record_is_resolved_again(tmp_path, cache, damage):
    path = _tokenizer_file(tmp_path / "tok.json")
    good = resolve_tokenizer(path)
    (name,) = _records(cache)
    beside = cache / (name[:-5] + ".tokenizer.json")
    assert beside.read_text() == good.json
    damage(beside)
    assert info_cache.load(name[:-5]) is None
    assert resolve_tokenizer(path) == good
    assert beside.read_text() == good.json  # recorded again


def test_off_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", "off")
    path = _tokenizer_file(tmp_path / "tok.json")
    assert resolve_tokenizer(path) == resolve_tokenizer(path)
    assert info_cache.load(info_cache.keys(path, [], ())[0]) is None


def test_a_failing_resolve_is_not_recorded(tmp_path, cache):
    path = _tokenizer_file(tmp_path / "tok.json")
    from packer.errors import PackerError

    with pytest.raises(PackerError, match="--eos-token"):
        resolve_tokenizer(path, eos_token="<nope>")
    assert not cache.exists() or os.listdir(cache) == []


def test_other_options_reuse_the_tokenizer_as_used_and_equal_a_fresh_resolve(tmp_path, cache, monkeypatch):
    """A model folder resolved once: a resolve with other options (split special tokens, no EOS, no BOS) parses the
    recorded tokenizer as used (transformers' view, its note) instead of building the view again, and equals a
    resolve with no record at all; with that record's JSON gone, the view is built again."""
    pytest.importorskip("transformers")
    from packer.tokenize import follows, view_child
    from tests.tokenize.test_follows import llama2_like

    folder = llama2_like(tmp_path / "m")
    first = resolve_tokenizer(folder)
    assert any("differ in the" in n for n in first.notes)  # transformers' view is not the file here

    def built(*a, **k):
        raise AssertionError("transformers' view built again")

    options = [dict(split_special=True), dict(eos=False), dict(bos=False, split_special=True)]
    with monkeypatch.context() as m:
        m.setattr(follows, "as_used", built)
        m.setattr(view_child, "start", built)
        again = [resolve_tokenizer(folder, **o) for o in options]
    monkeypatch.setenv("PACKER_CACHE", "off")
    assert again == [resolve_tokenizer(folder, **o) for o in options]
    assert again[0].notes == first.notes and again[0].fingerprint == first.fingerprint and again[0].split_special
    monkeypatch.setenv("PACKER_CACHE", str(cache.parent))
    for name in os.listdir(cache):
        if name.endswith(".tokenizer.json"):
            (cache / name).unlink()
    assert resolve_tokenizer(folder, eos_token="</s>", bos=False) == resolve_tokenizer(folder, eos_token="</s>", bos=False)
