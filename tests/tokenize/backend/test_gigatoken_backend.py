"""gigatoken by name (``--tokenizer-backend gigatoken``): exact-checked like fastokens, same shards as HF."""

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
