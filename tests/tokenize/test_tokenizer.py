"""packer/tokenize/tokenizer.py: TokenizerInfo and the Encoder's two views of one result."""

from __future__ import annotations

import numpy as np

from packer.tokenize import Encoder, resolve_tokenizer

TEXTS = ["hello", "", "wörld ✓", "a" * 1000]


def test_the_byte_tokenizer_is_utf8_bytes_then_eos():
    info = resolve_tokenizer(None)
    assert (info.kind, info.vocab_size, info.eos_id) == ("bytes", 257, 256)
    ids, lengths = Encoder(info).encode_flat(TEXTS)
    assert lengths.tolist() == [len(t.encode()) + 1 for t in TEXTS]
    assert ids[: lengths[0]].tolist() == list(b"hello") + [256]


def test_flat_and_batch_views_agree(gpt2_path):
    for info in (resolve_tokenizer(None), resolve_tokenizer(gpt2_path), resolve_tokenizer(gpt2_path, eos=False)):
        enc = Encoder(info)
        ids, lengths = enc.encode_flat(TEXTS)
        starts = np.cumsum(lengths) - lengths
        assert [a.tolist() for a in enc.encode_batch(TEXTS)] == [ids[s:s + n].tolist() for s, n in zip(starts, lengths)]
        if info.eos_id is None:
            assert lengths[1] == 0  # "" encodes to nothing without EOS
        else:
            assert all(ids[s + n - 1] == info.eos_id for s, n in zip(starts, lengths))


def test_the_manifest_record_says_what_packer_changed(gpt2_path):
    info = resolve_tokenizer(gpt2_path)
    m = info.manifest()
    assert m["eos_id"] == info.eos_id and m["vocab_size"] == info.vocab_size and len(m["fingerprint"]) == 64
    assert resolve_tokenizer(gpt2_path).fingerprint == info.fingerprint  # deterministic


def _deepseek_like(folder, eos) -> str:
    """A byte-level BPE whose end of sentence is DeepSeek V3's ``<｜end▁of▁sentence｜>`` (none of the usual
    names), named by tokenizer_config.json as ``eos`` (a string or an AddedToken dict)."""
    import json
    import os

    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    os.makedirs(folder, exist_ok=True)
    vocab = {chr(i): i - 32 for i in range(33, 127)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")])
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos}, f)
    return str(folder)


def test_eos_from_tokenizer_config_where_no_usual_name(tmp_path, monkeypatch):
    """DeepSeek V3 exited 2 ("no end-of-document token I recognise") though its config names its EOS."""
    import pytest

    from packer.errors import PackerError

    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    eos = "<｜end▁of▁sentence｜>"
    for i, named in enumerate((eos, {"__type": "AddedToken", "content": eos, "lstrip": False, "normalized": True})):
        info = resolve_tokenizer(_deepseek_like(tmp_path / f"ds{i}", named), follows="file")
        assert info.eos_id == 95 and Encoder(info).encode_batch(["a b"])[0].tolist()[-1] == 95
    with pytest.raises(PackerError, match="eos_token"):  # a config naming nothing in the vocabulary
        resolve_tokenizer(_deepseek_like(tmp_path / "none", "<missing>"), follows="file")


def test_a_recorded_note_names_the_folder_of_this_build(tmp_path, monkeypatch):
    """Folder A resolved (its note recorded), then a copy B: B's note named A (the record's); now B."""
    import shutil

    import pytest

    from tests.tokenize.test_follows import llama2_like

    pytest.importorskip("transformers")
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    a = llama2_like(tmp_path / "A")
    b = str(tmp_path / "B")
    shutil.copytree(a, b)
    note_a = resolve_tokenizer(a).notes
    note_b = resolve_tokenizer(b).notes  # from the record A filled
    assert note_a[0].startswith(f"{a}: ") and note_b[0].startswith(f"{b}: ")
    assert note_b[0][len(b):] == note_a[0][len(a):] and a not in note_b[0]
