"""Long texts are encoded in pieces only where that gives the whole text's ids."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from packer.tokenize import long_texts
from packer.tokenize import Encoder, resolve_tokenizer

from tests.conftest import SAMPLE

LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def long_real_texts() -> list[str]:
    """Text nobody here wrote: Python's own sources, whole modules as single long texts."""
    import argparse
    import email.message
    import typing

    texts = []
    for mod in (argparse, typing, email.message):
        with open(mod.__file__, encoding="utf-8") as f:
            texts.append(f.read())
    docs = []
    with open(os.path.join(SAMPLE, "corpus.jsonl"), encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                text = json.loads(line)["text"]
            except (ValueError, KeyError, TypeError):
                continue  # sample_data has broken lines on purpose
            if isinstance(text, str):
                docs.append(text)
            if sum(map(len, docs)) > 3 * long_texts.BATCH_CHARS:  # enough for several batches of pieces (was all
                break  # 2 MB: HF's reference encoding of it, one thread, was most of these tests' time)
    texts.append("\n\n".join(docs))  # about 0.8 MB as one document
    texts.append("no newline at all " * 5000)  # nowhere to cut: stays whole
    texts.append("é\n" * 40000)  # newlines, but never after an ASCII letter or digit
    return texts


def test_cut_pieces_rejoin_and_start_at_a_safe_newline():
    for text in long_real_texts():
        pieces = long_texts.cut(text, piece_chars=4096)
        assert "".join(pieces) == text
        for p in pieces[1:]:
            assert p[0] == "\n"
        starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])[1:]
        for s in starts:
            assert text[s - 1].isascii() and text[s - 1].isalnum()
    assert len(long_texts.cut(long_real_texts()[0], piece_chars=4096)) > 5  # it does cut real text
    assert long_texts.cut("no newline at all " * 5000, piece_chars=4096) == ["no newline at all " * 5000]


def test_batches_keep_order_and_bound_characters():
    pieces = [str(i) * n for i, n in enumerate([10, 300, 5, 1000, 7, 7, 7])]
    calls = long_texts.batches(pieces, batch_chars=320)
    assert [p for c in calls for p in c] == pieces
    for c in calls:
        assert len(c) == 1 or sum(map(len, c)) <= 320


def _variant(gpt2_path: str, **changes) -> str:
    with open(gpt2_path, encoding="utf-8") as f:
        d = json.load(f)
    d.update(changes)
    return json.dumps(d)


def _byte_level_after(regex: str) -> dict:
    return {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }


def test_cut_rule_accepts_gpt2_and_llama3_regex_and_refuses_the_rest(gpt2_path):
    from tokenizers import Tokenizer

    def rule(js):
        return long_texts.cut_rule(Tokenizer.from_str(js))

    with open(gpt2_path, encoding="utf-8") as f:
        assert rule(f.read()) is None
    assert rule(_variant(gpt2_path, pre_tokenizer=_byte_level_after(LLAMA3_REGEX))) is None
    # A regex that joins a letter to the newline after it: the cut would change pre-tokens.
    assert "joins" in rule(_variant(gpt2_path, pre_tokenizer=_byte_level_after(r"[a-z]\n|[^\n]+|\n")))
    prefix = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    assert "add_prefix_space" in rule(_variant(gpt2_path, pre_tokenizer=prefix))
    assert "normalizer" in rule(_variant(gpt2_path, normalizer={"type": "Lowercase"}))
    assert "no pre-tokenizer" in rule(_variant(gpt2_path, pre_tokenizer=None))
    with open(gpt2_path, encoding="utf-8") as f:
        added = json.load(f)["added_tokens"]
    stripping = [{**t, "rstrip": True} for t in added]
    assert "added token" in rule(_variant(gpt2_path, added_tokens=stripping))


@pytest.mark.parametrize("pre", ["gpt2", "llama3", "joins"])
def test_encoder_ids_equal_whole_text_ids(gpt2_path, tmp_path, pre):
    """Whatever cut_rule decides, the Encoder's ids are HF's ids for the whole text."""
    from tokenizers import Tokenizer

    changes = {"llama3": {"pre_tokenizer": _byte_level_after(LLAMA3_REGEX)},
               "joins": {"pre_tokenizer": _byte_level_after(r"[a-z]\n|[^\n]+|\n")}}.get(pre, {})
    path = tmp_path / "tok.json"
    path.write_text(_variant(gpt2_path, **changes), encoding="utf-8")
    info = resolve_tokenizer(str(path))
    enc = Encoder(info)
    assert enc._cut == (pre != "joins")
    calls = []
    batch = enc._batch
    enc._batch = lambda texts, **kw: calls.append(sum(map(len, texts))) or batch(texts, **kw)

    texts = long_real_texts() + ["short", ""]
    ids, lengths = enc.encode_flat(texts)
    hf = Tokenizer.from_str(info.json)
    want = [e.ids + [info.eos_id] for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert lengths.tolist() == [len(w) for w in want]
    assert ids.tolist() == [i for w in want for i in w]
    if enc._cut:  # memory: no call saw much more than BATCH_CHARS, though the texts are longer
        assert max(len(t) for t in texts) > long_texts.BATCH_CHARS
        assert max(calls) <= long_texts.BATCH_CHARS + long_texts.PIECE_CHARS * 4


def test_cut_rule_says_no_when_a_component_cannot_be_read():
    class Broken:
        def __getstate__(self):
            raise RuntimeError("no state")

    class Tok:
        normalizer = Broken()

    assert "unreadable" in long_texts.cut_rule(Tok())


def test_a_long_text_encoded_in_pieces_gives_the_ids_of_the_whole(monkeypatch):
    """Issue 53.3: the byte tokenizer makes a long text's ids a piece at a time, straight into the
    shard dtype, and tiktoken/fastokens get it in cut pieces: the ids are those of the whole text."""
    texts = ["short", "ab\n" * 3000 + "é中🙂\ud800 tail", "", "x\n" * 5000, "🙂" * 2000]
    eos = np.array([256], dtype=np.uint32)
    want, want_len = long_texts.bytes_flat(texts, eos)  # no text is long: the one-buffer path
    monkeypatch.setattr(long_texts, "LONG_CHARS", 1000)
    monkeypatch.setattr(long_texts, "LONG_PIECE_CHARS", 333)  # cuts inside multi-byte characters' text
    for dtype in ("uint16", "uint32"):
        got, got_len = long_texts.bytes_flat(texts, eos, dtype)
        assert got.dtype == dtype and np.array_equal(got, want) and np.array_equal(got_len, want_len)
    got, got_len = long_texts.bytes_flat(texts, eos[:0], "uint16")
    assert np.array_equal(got_len, want_len - 1) and np.array_equal(got, want[want != 256])

    calls = []

    def encode_flat(batch, eos, prefix):  # one id per character; prefix and suffix around each text
        calls.append([len(t) for t in batch])
        arrays = [np.array(list(prefix) + [ord(c) % 60000 for c in t] + list(eos or ()), np.uint32) for t in batch]
        return np.concatenate(arrays), np.array([len(a) for a in arrays], np.int64)

    ids, lengths = long_texts.flat_in_pieces(texts, encode_flat, (1,), (2, 3), "uint16")
    whole, whole_len = encode_flat(texts, (2, 3), (1,))
    assert ids.dtype == np.uint16 and np.array_equal(ids, whole) and np.array_equal(lengths, whole_len)
    assert len(calls) > 40 and [2000] in calls  # cut texts went a piece a call; one with no cut place, whole


@pytest.mark.parametrize("backend", ["tiktoken", "fastokens", "hf"])
def test_every_backend_gives_a_long_texts_ids_in_the_shard_dtype(gpt2_path, monkeypatch, backend):
    """The Encoder on texts over LONG_CHARS (tiktoken and fastokens: in cut pieces; HF: in its pieces
    as before): the ids of the whole text, made in uint16."""
    from packer.tokenize import choose_backend

    if backend == "fastokens":
        pytest.importorskip("fastokens")
    info = choose_backend(resolve_tokenizer(gpt2_path), "tiktoken" if backend != "hf" else "hf")
    if backend == "tiktoken":
        monkeypatch.setenv("PACKER_FASTOKENS", "off")
    texts = ["one", long_real_texts()[0], "two\n", long_real_texts()[3]]
    want, want_len = Encoder(info).encode_flat(texts)
    monkeypatch.setattr(long_texts, "LONG_CHARS", 20000)
    monkeypatch.setattr(long_texts, "LONG_PIECE_CHARS", 4096)
    got, got_len = Encoder(info).encode_flat(texts, "uint16")
    assert got.dtype == np.uint16 and np.array_equal(got, want) and np.array_equal(got_len, want_len)


def test_the_cut_rule_is_recorded_and_read_back_without_parsing_the_tokenizer(gpt2_path, tmp_path, monkeypatch):
    """Issue 52: a worker that meets a long text on tiktoken or fastokens parsed the HF tokenizer only for the
    cut rule (2.8 s for Gemma 3); the answer is recorded per tokenizer and read back. An unreadable record
    is worked out again; with the record off, every call works it out."""
    from tokenizers import Tokenizer

    parsed = []

    def load():
        parsed.append(1)
        return Tokenizer.from_file(gpt2_path)

    refusing = Tokenizer.from_str(_variant(gpt2_path, normalizer={"type": "Lowercase"}))
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    assert long_texts.recorded_cut_rule("fp-gpt2", False, load) is None and len(parsed) == 1
    assert long_texts.recorded_cut_rule("fp-gpt2", False, load) is None and len(parsed) == 1  # read back
    why = long_texts.recorded_cut_rule("fp-lower", False, lambda: refusing)
    assert "normalizer" in why and long_texts.recorded_cut_rule("fp-lower", False, load) == why and len(parsed) == 1
    assert long_texts.recorded_cut_rule("fp-gpt2", True, load) is None and len(parsed) == 2  # another key
    for f in (tmp_path / "cache" / "backend-checks").glob("cut-*.json"):
        f.write_text("{not json")
    assert long_texts.recorded_cut_rule("fp-gpt2", False, load) is None and len(parsed) == 3
    monkeypatch.setenv("PACKER_CACHE", "off")
    for n in (4, 5):
        assert long_texts.recorded_cut_rule("fp-gpt2", False, load) is None and len(parsed) == n
