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
