"""gigatoken by name (``--tokenizer-backend gigatoken``): exact-checked like fastokens, same shards as HF."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("gigatoken")
pytest.importorskip("tiktoken")

from packer import build  # noqa: E402
from packer.errors import PackerError  # noqa: E402
from packer.tokenize import Encoder, choose_backend, forget_parsed, resolve_tokenizer  # noqa: E402
from packer.tokenize.backend import gigatoken_backend as G  # noqa: E402
from tests.conftest import write_jsonl  # noqa: E402

TEXTS = [f"doc {i}: the quick brown fox {'jumps ' * (i % 30)}over the lazy dog. café 日本 {i * 7919}\n\n  x" for i in range(300)]


def _shards(out):
    d = os.path.join(out, "shards")
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


@pytest.mark.parametrize("family", ["gpt2-like", "llama3-like"])
def test_gigatoken_by_name_gives_hfs_ids_and_shards(tmp_path, small_family, family):
    """Chosen by name, checked (hard strings, input texts), its ids are HF's on every text and its
    shards are the HF backend's, byte for byte; added tokens' literal strings go to HF as under fastokens."""
    tok = os.path.join(small_family(family), "tokenizer.json")
    info = choose_backend(resolve_tokenizer(tok), "gigatoken", lambda: TEXTS[:50])
    assert info.backend == "gigatoken" and "encoded by gigatoken" in info.backend_reason
    texts = TEXTS + ["", " ", "a<|endoftext|>b", "\u00a0\u3000 tab\tend"]
    enc, hf = Encoder(info), Encoder(choose_backend(resolve_tokenizer(tok), "hf"))
    assert isinstance(enc.tiktoken, G.GigatokenEncoder)
    a, b = enc.encode_flat(texts), hf.encode_flat(texts)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    src = tmp_path / "in.jsonl"
    write_jsonl(src, TEXTS)
    g = build(str(src), str(tmp_path / "g"), tokenizer=tok, seq_len=128, workers=2, unit_mb=0.01, quiet=True,
              tokenizer_backend="gigatoken")
    h = build(str(src), str(tmp_path / "h"), tokenizer=tok, seq_len=128, workers=1, unit_mb=0.01, quiet=True,
              tokenizer_backend="hf")
    assert g.manifest["tokenizer"]["backend"] == "gigatoken"
    assert g.manifest["tokenizer"]["backend_reason"].startswith("asked for (--tokenizer-backend gigatoken)")
    assert len(_shards(str(tmp_path / "g"))) > 1 and _shards(str(tmp_path / "g")) == _shards(str(tmp_path / "h"))


def test_gigatoken_missing_or_inexact_stops_the_build_in_one_line(tmp_path, small_family, monkeypatch):
    """Not installed, or other ids than HF on the hard strings: the named backend stops the build, nothing built."""
    tok = os.path.join(small_family("gpt2-like"), "tokenizer.json")
    src = tmp_path / "in.jsonl"
    write_jsonl(src, TEXTS[:20])
    monkeypatch.setattr(G, "version", lambda: None)
    G._CHECKED.clear(), forget_parsed()
    with pytest.raises(PackerError, match=r"^--tokenizer-backend gigatoken: gigatoken is not installed .*nothing was built"):
        build(str(src), str(tmp_path / "a"), tokenizer=tok, seq_len=128, workers=1, quiet=True, tokenizer_backend="gigatoken")
    monkeypatch.undo()
    G._CHECKED.clear(), forget_parsed()
    real = G.GigatokenEncoder.__init__

    def off_by_one(self, tokenizer_json, base):  # an engine that differs from HF: the hard strings catch it
        real(self, tokenizer_json, base)
        inner = self._flat
        self._flat = lambda texts, add_special_tokens=False: (lambda r: ((r[0] + 1).astype(np.uint32), r[1]))(inner(texts))

    monkeypatch.setattr(G.GigatokenEncoder, "__init__", off_by_one)
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))  # no record of a pass
    with pytest.raises(PackerError, match=r"gigatoken cannot load this tokenizer, or gave other ids than HF"):
        build(str(src), str(tmp_path / "b"), tokenizer=tok, seq_len=128, workers=1, quiet=True, tokenizer_backend="gigatoken")
    assert not os.path.exists(tmp_path / "b" / "manifest.json")


def test_gigatoken_under_nfc_is_handed_hfs_normalized_text(tmp_path, small_family, monkeypatch):
    """Under an NFC normalizer (Qwen3's) gigatoken 0.10.0 orders U+10D27 U+10F46 otherwise than HF's tables (one
    document of real source code, a regex of combining marks): packer hands gigatoken HF's NFC output and loads it
    without its normalizer, so its ids are HF's on that pair and on every normalization string; an engine that
    normalizes again with its own tables fails those strings, so the named backend stops instead."""
    from tokenizers import Tokenizer

    from packer.tokenize.backend.tiktoken_check import normal_form_strings

    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    forget_parsed()
    tok = os.path.join(small_family("qwen-like"), "tokenizer.json")
    pair = "x \U00010d27\U00010f46 y"
    info = choose_backend(resolve_tokenizer(tok), "gigatoken", lambda: TEXTS[:20])
    assert info.backend == "gigatoken" and "NFC first" in info.backend_reason
    enc, hf = Encoder(info), Encoder(choose_backend(resolve_tokenizer(tok), "hf"))
    texts = [pair, *normal_form_strings()]
    a, b = enc.encode_flat(texts), hf.encode_flat(texts)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    raw = G.load(resolve_tokenizer(tok).json)  # gigatoken with its own normalizer: what the strings are for
    own = [int(i) for i in raw.encode_batch([pair], parallel=False).layout.content.data]
    assert own != Tokenizer.from_file(tok).encode(pair, add_special_tokens=False).ids
    monkeypatch.setattr(G, "_without_normalizer", lambda j: j)  # HF's NFC, then gigatoken's own again
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache2"))
    G._CHECKED.clear(), forget_parsed()
    src = tmp_path / "in.jsonl"
    write_jsonl(src, TEXTS[:20])
    with pytest.raises(PackerError, match=r"gigatoken cannot load this tokenizer, or gave other ids than HF"):
        build(str(src), str(tmp_path / "b"), tokenizer=tok, seq_len=128, workers=1, quiet=True, tokenizer_backend="gigatoken")
    G._CHECKED.clear(), forget_parsed()


# gigatoken alone: where tiktoken cannot express the tokenizer (SentencePiece BPE with byte_fallback), as fastokens alone.

@pytest.fixture(scope="module")
def sentencepiece_forms(small_family, tmp_path_factory) -> dict:
    """bench/families.py's llama2-like with every printable ASCII character in its vocabulary (as real ones
    have), in the three forms the real families ship: Llama 2's file (normalizer Prepend + Replace), Metaspace
    (Mistral v3; Llama 2 as transformers 5 rebuilds it), Gemma 3's (Replace normalizer, Split on spaces)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers

    d = json.loads(open(os.path.join(small_family("llama2-like"), "tokenizer.json"), encoding="utf-8").read())
    for c in map(chr, range(33, 127)):
        d["model"]["vocab"].setdefault(c, len(d["model"]["vocab"]))
    root, out = tmp_path_factory.mktemp("giga_alone"), {}
    for form in ("file", "metaspace", "gemma"):
        tok = Tokenizer.from_str(json.dumps(d))
        if form == "metaspace":
            tok.normalizer, tok.pre_tokenizer = None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        elif form == "gemma":
            tok.normalizer = normalizers.Replace(" ", "\u2581")
            tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
        out[form] = str(root / f"{form}.json")
        tok.save(out[form])
    return out


@pytest.mark.parametrize("form", ["file", "metaspace", "gemma"])
def test_gigatoken_alone_gives_hfs_ids_and_shards(tmp_path, sentencepiece_forms, form, monkeypatch):
    """tiktoken cannot express byte_fallback; gigatoken by name runs such a tokenizer alone, checked on the
    hard strings and Metaspace's: HF's ids on every one and on the input texts, and the HF backend's shards
    byte for byte (2 workers: a forked worker uses the checked encoder or builds its own the same way)."""
    from packer.tokenize.backend import fastokens_alone as A
    from packer.tokenize.backend.tiktoken_check import hard_strings

    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    forget_parsed()
    path = sentencepiece_forms[form]
    info = choose_backend(resolve_tokenizer(path), "gigatoken", lambda: TEXTS[:50])
    assert info.backend == "gigatoken" and "gigatoken runs it exactly" in info.backend_reason
    assert "tiktoken cannot express it" in info.backend_reason
    enc, hf = Encoder(info), Encoder(choose_backend(resolve_tokenizer(path), "hf"))
    assert isinstance(enc.tiktoken, G.GigatokenEncoder)
    strings = TEXTS + A.METASPACE_STRINGS + [t for t in hard_strings()[:400] if not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]
    a, b = enc.encode_flat(strings), hf.encode_flat(strings)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    src = tmp_path / "in.jsonl"
    write_jsonl(src, TEXTS)
    forget_parsed()
    g = build(str(src), str(tmp_path / "g"), tokenizer=path, seq_len=128, workers=2, unit_mb=0.01, quiet=True,
              tokenizer_backend="gigatoken")
    h = build(str(src), str(tmp_path / "h"), tokenizer=path, seq_len=128, workers=1, unit_mb=0.01, quiet=True,
              tokenizer_backend="hf")
    assert g.manifest["tokenizer"]["backend"] == "gigatoken"
    assert len(_shards(str(tmp_path / "g"))) > 1 and _shards(str(tmp_path / "g")) == _shards(str(tmp_path / "h"))


def test_gigatoken_alone_pass_is_on_record_and_needs_no_hf(tmp_path, sentencepiece_forms, monkeypatch):
    """The pass is recorded per engine: the next choice reads it back, parsing no HF tokenizer; fastokens'
    record is another one (a pass of one engine never stands for the other)."""
    from packer.tokenize import parsed_hf
    from packer.tokenize.backend import fastokens_alone as A
    from packer.tokenize.backend import tiktoken_backend as T

    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    forget_parsed()
    path = sentencepiece_forms["gemma"]
    choose_backend(resolve_tokenizer(path), "gigatoken", lambda: TEXTS[:20])
    forget_parsed()
    again = resolve_tokenizer(path)
    later = T.choose(again.json, again.fingerprint, "gigatoken", lambda: [], None, defer_input=True)
    assert later.backend == "gigatoken" and later.later.alone and parsed_hf() == 0
    assert A.on_record(again.json, again.fingerprint, False, engine="fastokens") is None


def test_gigatoken_alone_differs_or_cannot_load_stops_the_build_in_one_line(tmp_path, sentencepiece_forms, monkeypatch):
    """An engine panic while loading (pyo3's PanicException is a BaseException, as gigatoken 0.10.0's on
    Mistral v3's file), or other ids than HF: the named backend stops the build in one line, nothing built."""
    import gigatoken

    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "in.jsonl"
    write_jsonl(src, TEXTS[:20])
    path = sentencepiece_forms["metaspace"]

    class Panic(BaseException):  # as pyo3_runtime.PanicException
        pass

    def panics(_json):
        raise Panic("src/load_tokenizer/hf.rs: called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(gigatoken.Tokenizer, "from_json", staticmethod(panics))
    forget_parsed()
    with pytest.raises(PackerError, match=r"^--tokenizer-backend gigatoken: gigatoken cannot load this tokenizer"):
        build(str(src), str(tmp_path / "a"), tokenizer=path, seq_len=128, workers=1, quiet=True, tokenizer_backend="gigatoken")
    monkeypatch.undo()
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    real = G.GigatokenEncoder.__init__

    def off_by_one(self, tokenizer_json, base):
        real(self, tokenizer_json, base)
        inner = self._flat
        self._flat = lambda texts, add_special_tokens=False: (lambda r: ((r[0] + 1).astype(np.uint32), r[1]))(inner(texts))

    monkeypatch.setattr(G.GigatokenEncoder, "__init__", off_by_one)
    forget_parsed()
    with pytest.raises(PackerError, match=r"gigatoken cannot load this tokenizer, or gave other ids than HF"):
        build(str(src), str(tmp_path / "b"), tokenizer=path, seq_len=128, workers=1, quiet=True, tokenizer_backend="gigatoken")
    assert not os.path.exists(tmp_path / "a" / "manifest.json") and not os.path.exists(tmp_path / "b" / "manifest.json")


def test_auto_runs_gigatoken_alone_for_a_big_byte_fallback_tokenizer(tmp_path, sentencepiece_forms, monkeypatch):
    """auto tries gigatoken before fastokens for byte_fallback BPE from ALONE_FROM_JSON_CHARS (lowered here to
    the small tokenizer's size), says why in the reason, and gives the shards fastokens gives; below the size,
    or with PACKER_GIGATOKEN=off, fastokens alone runs as before."""
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    path = sentencepiece_forms["gemma"]
    chars = len(resolve_tokenizer(path).json)
    src = tmp_path / "in.jsonl"
    write_jsonl(src, TEXTS * 40)  # an input over 0.25x the tokenizer.json: auto may leave HF
    ran = {}
    for case, limit, env in (("below", chars + 1, None), ("from", chars, None), ("off", chars, "off")):
        monkeypatch.setattr(G, "ALONE_FROM_JSON_CHARS", limit)
        monkeypatch.delenv("PACKER_GIGATOKEN", raising=False) if env is None else monkeypatch.setenv("PACKER_GIGATOKEN", env)
        forget_parsed()
        r = build(str(src), str(tmp_path / case), tokenizer=path, seq_len=128, workers=2, unit_mb=0.05, quiet=True)
        ran[case] = r.manifest["tokenizer"]["backend"]
        if case == "from":
            assert "auto runs gigatoken before fastokens for byte_fallback BPE" in r.manifest["tokenizer"]["backend_reason"]
    assert ran == {"below": "fastokens", "from": "gigatoken", "off": "fastokens"}
    assert _shards(str(tmp_path / "below")) == _shards(str(tmp_path / "from")) == _shards(str(tmp_path / "off"))
