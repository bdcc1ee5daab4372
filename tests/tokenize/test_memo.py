"""The per-process tokenizer caches are keyed on all that decides them and never change a stored object."""

from __future__ import annotations

from dataclasses import replace

import pytest

from packer.tokenize import Encoder, choose_backend, resolve_tokenizer
from packer.tokenize.backend import tiktoken_backend as TE
from packer.tokenize import tokenizer as T
from packer.tokenize.memo import remember


def test_remember_keeps_the_last_keys_and_never_overwrites():
    cache: dict = {}
    made = []
    make = lambda v: (lambda: made.append(v) or v)  # noqa: E731
    assert remember(cache, "a", make(1), keep=2) == 1
    assert remember(cache, "a", make(2), keep=2) == 1  # a hit: make is not called
    assert remember(cache, "b", make(3), keep=2) == 3
    assert remember(cache, "c", make(4), keep=2) == 4
    assert list(cache) == ["b", "c"] and made == [1, 3, 4]


def test_split_special_settings_get_their_own_tokenizers(gpt2_path):
    """A build with --split-special-tokens and one without, in one process: neither changes the other's tokenizer."""
    plain = resolve_tokenizer(gpt2_path)
    split = replace(plain, split_special=True)
    a, b = T.loaded_hf(plain), T.loaded_hf(split)
    assert a is not b and a.encode_special_tokens is False and b.encode_special_tokens is True
    T._LOADED.clear()
    a2, b2 = T.loaded_hf(plain), T.loaded_hf(split)
    assert (a2.encode_special_tokens, b2.encode_special_tokens) == (False, True)
    text = ["a<|endoftext|>b"]
    one = [x.tolist() for x in Encoder(choose_backend(plain, "hf")).encode_batch(text)]
    two = [x.tolist() for x in Encoder(choose_backend(split, "hf")).encode_batch(text)]
    assert one != two and [x.tolist() for x in Encoder(choose_backend(plain, "hf")).encode_batch(text)] == one
    assert a2.encode_special_tokens is False


def test_fast_encoders_are_keyed_on_split_special(gpt2_path):
    pytest.importorskip("tiktoken")
    plain = choose_backend(resolve_tokenizer(gpt2_path), "tiktoken")
    split = choose_backend(resolve_tokenizer(gpt2_path, split_special=True), "tiktoken")
    e1 = TE.encoder_for(plain.json, plain.fingerprint, None, False)
    e2 = TE.encoder_for(split.json, split.fingerprint, None, True)
    assert e1 is not e2 and (e1.split_special, e2.split_special) == (False, True)
    text = ["x<|endoftext|>y"]
    assert Encoder(plain).encode_batch(text)[0].tolist() != Encoder(split).encode_batch(text)[0].tolist()
