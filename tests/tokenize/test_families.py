"""Every model family's tokenizer, as its model expects it: tokenizer(text) (the template's BOS/[CLS], its
suffix) then EOS, exactly; special-token strings inside text counted, or split with --split-special-tokens.

The families are built at test time (bench/families.py); the same checks on the real files, where present:
tests/tokenize/test_real_families.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.conftest import SAMPLE, load_script, write_jsonl

CORPUS = os.path.join(SAMPLE, "corpus.jsonl")
SPECIAL_TEXT = "code: print('<s>%s</s>' % x)\n[MASK] and [CLS] in docs; <|endoftext|> on a web page <|begin_of_text|>."
ODD_TEXTS = [SPECIAL_TEXT, "ｶﾀｶﾅ e\u0301 ﬁ ①", "  leading spaces\n\n\ttabs", "a", "日本語のテキスト 👍🏽"]


@pytest.fixture(scope="session")
def families(small_family) -> dict[str, str]:
    return {name: small_family(name) for name in load_script("bench/families.py").FAMILIES}


@pytest.fixture(scope="session")
def texts() -> list[str]:
    fam = load_script("bench/families.py")
    return fam.sample_texts(120)[:120] + ODD_TEXTS


def expected(path: str, texts, eos_id, split=False) -> list[list[int]]:
    """What tokenizers' own template gives (tokenizer(text) in transformers), then EOS unless it ends with it."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path if path.endswith(".json") else os.path.join(path, "tokenizer.json"))
    tok.no_truncation()
    tok.encode_special_tokens = split
    out = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=True).ids
        out.append(ids if eos_id is None or ids[-1:] == [eos_id] else ids + [eos_id])
    return out


def encode(path: str, texts, backend: str, **kw) -> tuple[list[list[int]], object]:
    from packer.tokenize import Encoder, choose_backend, resolve_tokenizer

    info = choose_backend(resolve_tokenizer(path, **kw), backend, lambda: texts[:50])
    return [a.tolist() for a in Encoder(info).encode_batch(texts)], info


FAMILY_TEMPLATES = {  # family -> (starts with, ends with) as token strings
    "gpt2-like": ([], ["<|endoftext|>"]),
    "llama3-like": (["<|begin_of_text|>"], ["<|end_of_text|>"]),
    "qwen-like": ([], ["<|endoftext|>"]),
    "llama2-like": (["<s>"], ["</s>"]),
    "unigram-nfkc": ([], ["</s>"]),
    "bert-wordpiece": (["[CLS]"], ["[SEP]"]),
    "wordlevel-70k": ([], ["<|endoftext|>"]),
}


@pytest.mark.parametrize("name", sorted(FAMILY_TEMPLATES))
def test_each_family_encodes_as_its_template_then_eos(families, texts, name):
    from tokenizers import Tokenizer

    path = families[name]
    got, info = encode(path, texts, "auto")
    assert got == expected(path, texts, info.eos_id)
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    pre, post = FAMILY_TEMPLATES[name]
    assert [tok.id_to_token(i) for i in info.prefix] == pre
    assert [tok.id_to_token(i) for i in info.after] == post
    for token in pre + post:  # the summary/manifest line names each by string and id
        assert f"{token} ({tok.token_to_id(token)})" in info.added
    hf, _ = encode(path, texts, "hf")
    assert hf == got


def test_auto_takes_the_fast_engine_for_byte_level_families(families, texts):
    for name in ("gpt2-like", "llama3-like", "qwen-like"):
        _, info = encode(families[name], texts, "auto")
        assert info.backend in ("tiktoken", "fastokens"), (name, info.backend_reason)  # fastokens where installed
    _, info = encode(families["qwen-like"], texts, "auto")
    assert "NFC first" in info.backend_reason


def test_nfc_family_on_tiktoken_normalises_first(families):
    # Decomposed input: HF's NFC normalizer composes it; so must the fast engine, or the ids differ.
    texts = ["cafe\u0301 re\u0301sume\u0301 A\u030a " * 20, "\u1100\u1161\u11a8 한국", "e\u0301" * 300]
    got, info = encode(families["qwen-like"], texts, "tiktoken")
    assert info.backend == "tiktoken"
    assert got == expected(families["qwen-like"], texts, info.eos_id)


def test_no_bos_and_bos_token_override_the_template(families, texts):
    path = families["llama2-like"]
    ref = expected(path, texts, None)
    none, info = encode(path, texts, "auto", bos=False)
    assert info.prefix == () and none == [r[1:] + [info.eos_id] for r in ref]
    assert "no bos (--no-bos)" in info.added
    other, info = encode(path, texts, "auto", bos_token="</s>")
    assert other == [[info.eos_id] + r[1:] + [info.eos_id] for r in ref]
    from packer.errors import PackerError

    with pytest.raises(PackerError, match="--bos 'nope' is not in the vocabulary"):
        encode(path, texts, "auto", bos_token="nope")


def test_model_folder_follows_transformers_on_config_flags(families, texts, tmp_path):
    """transformers 5 drops tokenizer_config.json's add_bos_token when a tokenizer.json is there: so does packer."""
    src = os.path.join(families["qwen-like"], "tokenizer.json")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(open(src, "rb").read())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": True, "bos_token": "<|im_start|>", "eos_token": "<|endoftext|>"}))
    got, info = encode(str(folder), texts[:20], "auto")
    assert got == expected(src, texts[:20], info.eos_id) and info.prefix == ()
    tf = pytest.importorskip("transformers")
    hf = tf.AutoTokenizer.from_pretrained(str(folder))
    assert got == [hf(t)["input_ids"] + [info.eos_id] for t in texts[:20]]


def test_matches_transformers_tokenizer_call(families, texts):
    tf = pytest.importorskip("transformers")
    for name, path in sorted(families.items()):
        got, info = encode(path, texts, "auto")
        hf = tf.AutoTokenizer.from_pretrained(path)
        ref = []
        for t in texts:
            ids = hf(t)["input_ids"]
            ref.append(ids if ids[-1:] == [info.eos_id] else ids + [info.eos_id])
        assert got == ref, name


def _build(tmp_path, name, inputs, tokenizer, **kw):
    from packer import build

    out = str(tmp_path / name)
    return out, build(inputs, out, seq_len=128, tokenizer=tokenizer, workers=1, quiet=True, **kw)


def test_special_strings_in_text_are_counted_with_file_line(families, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", ["plain text", SPECIAL_TEXT, "\n", "more", "two [MASK] [MASK]"])
    out, res = _build(tmp_path, "bert", [src], families["bert-wordpiece"])
    t = res.manifest["totals"]
    assert t["special_in_text"] == {"[CLS]": 1, "[MASK]": 2}
    assert t["special_in_text_examples"]["[MASK]"] == [f"{src}:2", f"{src}:5"]
    assert t["special_in_text_examples"]["[CLS]"] == [f"{src}:2"]
    from packer.inspect.stats import summary_lines

    # Issue 53.8: line 2 holds [CLS] and [MASK]: 2 documents, not the per-token sum (3)
    assert t["special_in_text_documents"] == 2
    assert any(line.startswith("special tokens  2 document(s)") for line in summary_lines(res.manifest))
    # split: encoded as plain text, exact against HF with encode_special_tokens, nothing counted
    out2, res2 = _build(tmp_path, "bert-split", [src], families["bert-wordpiece"], split_special_tokens=True)
    assert "special_in_text" not in res2.manifest["totals"]
    assert res2.manifest["settings"]["split_special_tokens"] is True
    texts = ["plain text", SPECIAL_TEXT, "\n", "more", "two [MASK] [MASK]"]
    got, info = encode(families["bert-wordpiece"], texts, "auto", split_special=True)
    assert got == expected(families["bert-wordpiece"], texts, info.eos_id, split=True)
    assert got != expected(families["bert-wordpiece"], texts, info.eos_id, split=False)


def test_split_special_tokens_exact_on_the_fast_engine(families):
    texts = [SPECIAL_TEXT, "x<|endoftext|>y <|begin_of_text|>", "none here"]
    for name in ("gpt2-like", "llama3-like"):
        for split in (False, True):
            got, info = encode(families[name], texts, "tiktoken", split_special=split)
            assert got == expected(families[name], texts, info.eos_id, split=split), (name, split)
    tf = pytest.importorskip("transformers")
    hf = tf.AutoTokenizer.from_pretrained(families["llama3-like"], split_special_tokens=True)
    got, info = encode(families["llama3-like"], texts, "auto", split_special=True)
    assert got == [hf(t)["input_ids"] + [info.eos_id] for t in texts]


def test_engines_write_identical_shards_and_bos_is_a_resume_setting(families, tmp_path):
    from packer.errors import PackerError

    for name in ("llama3-like", "qwen-like"):
        a, ra = _build(tmp_path, name + "-auto", [CORPUS], families[name])
        b, rb = _build(tmp_path, name + "-hf", [CORPUS], families[name], tokenizer_backend="hf")
        assert ra.manifest["tokenizer"]["backend"] in ("tiktoken", "fastokens")
        assert [s["xxh3_128"] for s in ra.manifest["shards"]] == [s["xxh3_128"] for s in rb.manifest["shards"]]
    m = ra.manifest
    assert m["settings"].get("around_text") is None  # qwen-like adds EOS only: recorded as it always was
    out, r = _build(tmp_path, "l3", [CORPUS], families["llama3-like"])
    assert r.manifest["settings"]["around_text"]["prefix"] == [r.manifest["tokenizer"]["prefix_ids"][0]]
    assert "bos <|begin_of_text|>" in r.manifest["tokenizer"]["added"]
    from packer import build

    with pytest.raises(PackerError, match="around_text"):
        build([CORPUS], out, seq_len=128, tokenizer=families["llama3-like"], workers=1, quiet=True, resume=True, no_bos=True)


def test_big_vocabulary_is_uint32_and_no_tokens_names_file_line(families, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", ["some words here", "x " * 50])
    _, res = _build(tmp_path, "wl", [src], families["wordlevel-70k"])
    assert res.manifest["dtype"] == "uint32" and res.manifest["eos_id"] == 69_999
    src2 = write_jsonl(tmp_path / "ctl.jsonl", ["fine words", "\u0000\u0001", "more"])
    _, res2 = _build(tmp_path, "nt", [src2], families["bert-wordpiece"], no_eos=True, no_bos=True)
    assert res2.manifest["totals"]["skipped"] == {"no_tokens": 1}
    assert res2.manifest["totals"]["skipped_examples"]["no_tokens"] == [f"{src2}:2"]


def test_tiktoken_refusal_says_the_build_stops(families, texts):
    from packer.errors import PackerError

    with pytest.raises(PackerError, match=r"nothing was built .*--tokenizer-backend hf"):
        encode(families["llama2-like"], texts, "tiktoken")


def test_gpt2_like_build_adds_nothing_to_the_records(families, tmp_path):
    _, res = _build(tmp_path, "g", [CORPUS], families["gpt2-like"])
    assert "added" not in res.manifest["tokenizer"] and "around_text" not in res.manifest["settings"]
    assert np.all(np.array([s["tokens"] for s in res.manifest["shards"]]) > 0)


def test_unigram_unknown_token_is_no_special_in_text_and_each_text_is_searched_once(families):
    """A Unigram model names its unknown token by id only: it is not a special token found in
    text (unknown characters emit it, no literal "<unk>" was there); and a text with many hits of
    a special id is searched once per token, not once per hit."""
    from tokenizers import Tokenizer

    from packer.tokenize import Encoder, resolve_tokenizer
    from packer.tokenize.specials import found_in, unknown_token

    path = families["unigram-nfkc"]
    hf = Tokenizer.from_file(os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path)
    unk = unknown_token(hf)
    assert unk is not None and hf.token_to_id(unk) is not None
    info = resolve_tokenizer(path)
    assert unk not in dict(info.specials).values()
    text = "\u2603\u2604 snow \U0001F600" * 50  # characters the small vocabulary does not know
    ids, lengths = Encoder(info).encode_flat([text])
    assert hf.token_to_id(unk) in ids.tolist()
    assert Encoder(info).specials_found([text], ids, lengths) == []

    class Counting(str):
        searched = 0

        def __contains__(self, s):
            Counting.searched += 1
            return str.__contains__(self, s)

    special = {7: "<x>"}
    hits = np.array([7] * 1000 + [1], dtype=np.uint32)
    assert found_in([Counting("a <x> b")], hits, np.array([len(hits)]), (), (), special) == [(0, "<x>")]
    assert Counting.searched == 1
