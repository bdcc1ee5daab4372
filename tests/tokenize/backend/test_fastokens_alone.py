"""fastokens alone (where tiktoken cannot express the tokenizer) gives HF's ids exactly, or is not used.

Small tokenizers built now (bench/families.py's llama2-like: SentencePiece-style BPE with byte_fallback) with
each Metaspace form, and the real folders where present ($PACKER_TEST_TOKENIZERS, ../shared/data).
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("fastokens")

from tokenizers import Tokenizer, normalizers, pre_tokenizers  # noqa: E402

from packer.tokenize import Encoder, choose_backend, forget_parsed, parsed_hf, resolve_tokenizer  # noqa: E402
from packer.tokenize.backend import fastokens_alone as A  # noqa: E402
from packer.tokenize.backend import fastokens_backend as F  # noqa: E402
from packer.tokenize.backend import tiktoken_backend as T  # noqa: E402
from packer.tokenize.backend.tiktoken_check import hard_strings  # noqa: E402

from tests.conftest import SHARED, one_check_sample, write_jsonl  # noqa: E402

TEXTS = ["Hello world", "  two  spaces", " lead", "\u2581already", "\u2581 mixed", "", " ", "tab\tand\nnewline ",
         "\u3000ideographic", "\u00a0nbsp", "emoji 😀 and <0x41> and ▁▁x", "a" * 3000, "<s>x</s> y", "don't"]
REAL = os.environ.get("PACKER_TEST_TOKENIZERS") or os.path.expanduser("~/.cache/packer-test-tokenizers")
REAL_FOLDERS = {"deepseek_v3": os.path.join(REAL, "deepseek_v3"), "gemma3": os.path.join(REAL, "gemma3"),
                "llama2": os.path.join(REAL, "llama2"), "qwen3": os.path.join(REAL, "qwen3"),
                "llama3": os.path.join(SHARED, "llama3"), "mistral-v3": os.path.join(SHARED, "mistral-v3"),
                "gpt2": os.path.join(SHARED, "gpt2-tokenizer.json")}

PRESENT = sorted(n for n, p in REAL_FOLDERS.items() if os.path.exists(p))
# Issue 54: the default run builds 2 of the present folders (a seeded rotation, conftest.rotation); the rest
# are marked full (-m full). tests/tokenize/test_real_families.py builds auto against hf too, on its own sample.
in_full_sweep = one_check_sample(PRESENT, "test_real_folder_auto_and_hf_shards_are_the_same_bytes", "fastokens-alone")  # (tests/conftest.py marks them full)


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    forget_parsed()
    yield
    forget_parsed()


@pytest.fixture(scope="module")
def trained(small_family) -> str:
    """bench/families.py's llama2-like, as trained: its vocabulary lacks "<" and "0"."""
    return os.path.join(small_family("llama2-like"), "tokenizer.json")


@pytest.fixture(scope="module")
def llama2_file(trained, tmp_path_factory) -> str:
    """``trained`` with every printable ASCII character in its vocabulary, as real SentencePiece vocabularies have."""
    d = json.loads(open(trained, encoding="utf-8").read())
    vocab = d["model"]["vocab"]
    for c in map(chr, range(33, 127)):
        vocab.setdefault(c, len(vocab))
    path = str(tmp_path_factory.mktemp("alone_ascii") / "tokenizer.json")
    Tokenizer.from_str(json.dumps(d)).save(path)
    return path


def test_a_difference_fastokens_makes_is_caught_and_hf_encodes(trained):
    """Where the vocabulary lacks "<", "0", ..., fastokens encodes the text "<0x41>" as the byte token, HF as
    the bytes of each character: the hard strings hold such text, so auto stays on HF."""
    enc = A._encoder(open(trained, encoding="utf-8").read(), False, None)
    assert [a.tolist() for a in enc.encode_arrays(["<0x41>"])] != hf_ids(trained, ["<0x41>"])
    info = choose_backend(resolve_tokenizer(trained), "auto", lambda: TEXTS)
    assert info.backend == "hf"


def metaspace(llama2_file: str, tmp_path, scheme: str, split: bool, normalizer=None) -> str:
    """llama2-like with its Prepend + Replace normalizer swapped for a Metaspace pre-tokenizer (as transformers 5
    rebuilds Llama 2, and as Mistral v3 ships), saved as a file."""
    tok = Tokenizer.from_file(llama2_file)
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=split)
    path = str(tmp_path / f"metaspace-{scheme}-{split}.json")
    tok.save(path)
    return path


def hard(n: int = 400) -> list[str]:
    """The first ``n`` hard strings that are valid UTF-8 (HF raises on the others, as the encoder must)."""
    return [t for t in hard_strings()[:n] if not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]


def hf_ids(path_or_json: str, texts: list[str]) -> list[list[int]]:
    hf = Tokenizer.from_file(path_or_json) if os.path.exists(path_or_json) else Tokenizer.from_str(path_or_json)
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def text_ids(info, texts: list[str]) -> list[list[int]]:
    k, m = len(info.prefix), len(info.after)
    return [a[k:len(a) - m].tolist() for a in Encoder(info).encode_batch(texts)]


@pytest.mark.parametrize("scheme,split", [("first", False), ("always", False), ("never", False), ("first", True),
                                          ("always", True)])
def test_metaspace_is_given_to_fastokens_as_the_same_transform(llama2_file, tmp_path, scheme, split):
    """fastokens refuses Metaspace; its equivalent (a Replace normalizer, the prefix put here, a Split for
    split=True) gives HF's own Metaspace ids on strings aimed at it and on every hard string."""
    path = metaspace(llama2_file, tmp_path, scheme, split)
    info = choose_backend(resolve_tokenizer(path), "auto", lambda: TEXTS)
    assert info.backend == "fastokens" and "tiktoken cannot express it" in info.backend_reason
    strings = TEXTS + A.METASPACE_STRINGS + hard()
    assert text_ids(info, strings) == hf_ids(path, strings)


def test_a_normalizer_before_metaspace_stays_on_hf(llama2_file, tmp_path):
    """NFKC turns U+00A0 into a space before Metaspace sees it: the prefix no longer follows from the raw
    text, so the equivalence is not claimed and HF encodes."""
    path = metaspace(llama2_file, tmp_path, "first", False, normalizers.NFKC())
    assert A.without_metaspace(json.loads(open(path).read())) is None
    info = choose_backend(resolve_tokenizer(path), "auto", lambda: TEXTS)
    assert info.backend == "hf"


def test_the_file_form_prepend_replace_runs_alone(llama2_file):
    """Llama 2's own file (normalizer Prepend + Replace, no pre-tokenizer): fastokens as it is. Before, auto
    left every tokenizer tiktoken cannot express on HF."""
    info = choose_backend(resolve_tokenizer(llama2_file), "auto", lambda: TEXTS)
    assert info.backend == "fastokens"
    assert text_ids(info, TEXTS + hard()) == hf_ids(llama2_file, TEXTS + hard())


def test_a_pass_is_on_record_and_needs_no_hf(llama2_file, tmp_path):
    path = metaspace(llama2_file, tmp_path, "always", False)
    first = choose_backend(resolve_tokenizer(path), "auto", lambda: TEXTS)
    forget_parsed()
    again = resolve_tokenizer(path)  # from the resolve record: nothing parsed
    later = T.choose(again.json, again.fingerprint, "auto", lambda: [], None, defer_input=True)
    assert later.backend == "fastokens" and later.later.alone and parsed_hf() == 0
    assert later.later.hard_texts == int(first.backend_reason.split(" hard strings")[0].rsplit(" ", 1)[1])


def test_a_worker_without_the_checked_encoder_gives_the_same_ids(llama2_file, tmp_path, monkeypatch):
    """A worker that did not inherit the checked encoder makes its own; where fastokens is missing there,
    HF encodes every text (same ids)."""
    path = metaspace(llama2_file, tmp_path, "first", False)
    info = choose_backend(resolve_tokenizer(path), "auto", lambda: TEXTS)
    want = text_ids(info, TEXTS)
    forget_parsed()
    assert text_ids(info, TEXTS) == want
    forget_parsed()
    monkeypatch.setattr(A, "version", lambda: None)
    enc = A.encoder_for(info.json, info.fingerprint, False)
    assert enc._flat is None and [a.tolist() for a in enc.encode_arrays(TEXTS)] == hf_ids(path, TEXTS)


def test_fastokens_off_or_a_small_input_keeps_hf(llama2_file, monkeypatch):
    info = resolve_tokenizer(llama2_file)
    assert choose_backend(info, "auto", lambda: TEXTS, fast=10).backend == "hf"  # 10 bytes of input
    assert choose_backend(info, "auto", lambda: TEXTS, fast=len(info.json)).backend == "fastokens"
    forget_parsed()
    monkeypatch.setenv("PACKER_FASTOKENS", "off")
    assert choose_backend(info, "auto", lambda: TEXTS).backend == "hf"
    with pytest.raises(Exception, match="tiktoken"):
        choose_backend(info, "tiktoken", lambda: TEXTS)


@pytest.mark.parametrize("name", sorted(REAL_FOLDERS))
def test_real_folder_auto_and_hf_shards_are_the_same_bytes(name, tmp_path, monkeypatch):
    """Each real family: auto picks a fast engine (fastokens where tiktoken cannot express it), and its shards
    are byte-identical to --tokenizer-backend hf's. (Default run: 2 of the present folders, SAMPLE_RUN.)
    PACKER_GIGATOKEN=off: auto would run gigatoken alone for Gemma 3 (test_real_families.py checks that one
    against transformers); this module's engine is fastokens."""
    path = REAL_FOLDERS[name]
    if not os.path.exists(path):
        pytest.skip(f"{path} absent")
    from packer import build

    monkeypatch.setattr(F, "OVER_HF", 0)  # a small input: fastokens all the same
    monkeypatch.setenv("PACKER_GIGATOKEN", "off")
    monkeypatch.setattr(F, "OVER_TIKTOKEN", 0)
    src = tmp_path / "in.jsonl"
    write_jsonl(str(src), [f"{i}: {t}" for i, t in enumerate(TEXTS * 6)] + hard(300)[::3])
    got = {}
    for backend in ("auto", "hf"):
        r = build([str(src)], str(tmp_path / backend), tokenizer=path, seq_len=256, workers=1, quiet=True,
                  tokenizer_backend=backend)
        assert r.manifest["tokenizer"]["backend"] == ("fastokens" if backend == "auto" else "hf")
        got[backend] = {p.name: p.read_bytes() for p in (tmp_path / backend / "shards").iterdir()}
    assert got["auto"] and got["auto"] == got["hf"]


def test_fastokens_cuts_added_tokens_out_itself_where_checked(llama2_file, tmp_path):
    """Gemma 3's added tokens ("\\n", "\\n\\n", "▁▁", ...) are in nearly every text: sent to HF, fastokens would
    gain nothing. Where fastokens gives HF's ids on every added token's strings it encodes those texts itself;
    not under Metaspace (its prefix holds for whole texts only) nor --split-special-tokens."""
    strings = ["<s>x</s> y", "a</s>", " <unk> <s>", "<s><s>"] + TEXTS
    info = choose_backend(resolve_tokenizer(llama2_file), "auto", lambda: TEXTS)
    enc = Encoder(info).tiktoken
    before = enc.to_hf  # (texts the input check sent to HF)
    assert text_ids(info, strings) == hf_ids(llama2_file, strings) and enc.to_hf == before
    forget_parsed()
    path = metaspace(llama2_file, tmp_path, "first", False)
    info = choose_backend(resolve_tokenizer(path), "auto", lambda: TEXTS)
    enc = Encoder(info).tiktoken
    before = enc.to_hf
    assert text_ids(info, strings) == hf_ids(path, strings) and enc.to_hf >= before + 4
    forget_parsed()
    info = choose_backend(resolve_tokenizer(llama2_file, split_special=True), "auto", lambda: TEXTS)
    enc = Encoder(info).tiktoken
    before = enc.to_hf
    hf = Tokenizer.from_file(llama2_file)
    hf.encode_special_tokens = True
    assert text_ids(info, strings) == [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)]
    assert info.backend == "fastokens" and enc.to_hf >= before + 4


def test_ignore_merges_is_turned_off_and_texts_with_an_unreachable_entry_go_to_hf(llama2_file, tmp_path, monkeypatch):
    """Mistral v3's form: Metaspace, then a Split isolating literals, ignore_merges on (fastokens 0.3.5 runs it
    5x slower). The flag matters only for a piece that is a vocabulary entry the merges do not give; every
    piece is a substring of the text, so fastokens runs with the flag off, and a text holding such an entry
    (a byte token's name, an isolated literal, a word added to the vocabulary without merges) goes to HF."""
    path = metaspace(llama2_file, tmp_path, "first", False)
    d = json.loads(open(path, encoding="utf-8").read())
    d["model"]["ignore_merges"] = True
    for w in ("\u2581zzq", "[REF]"):
        d["model"]["vocab"][w] = len(d["model"]["vocab"])
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [d["pre_tokenizer"], {
        "type": "Split", "pattern": {"String": "[REF]"}, "behavior": "Isolated", "invert": False}]}
    path = str(tmp_path / "ignore_merges.json")
    Tokenizer.from_str(json.dumps(d)).save(path)
    at = ["zzq", "[REF]", "x[REF]y", "<0x41>"]
    zzq = d["model"]["vocab"]["\u2581zzq"]
    assert hf_ids(path, ["zzq"]) == [[zzq]]  # the flag's own effect: with it off, the merges spell it out
    given = []  # what fastokens is given
    monkeypatch.setattr(A, "FastokensEncoder", lambda j, *a: given.append(json.loads(j)) or F.FastokensEncoder(j, *a))
    enc = A._encoder(open(path, encoding="utf-8").read(), False, None)
    assert given[0]["model"]["ignore_merges"] is False
    assert {"\u2581zzq", "[REF]", "<0x41>"} <= set(enc.base.entries)
    assert [a.tolist() for a in enc.encode_arrays(at)] == hf_ids(path, at) and enc.to_hf == len(at)
    plain = [t for t in TEXTS if "<" not in t]  # (a text with "<s>" goes to HF for its added token)
    assert [a.tolist() for a in enc.encode_arrays(plain)] == hf_ids(path, plain) and enc.to_hf == len(at)
    info = choose_backend(resolve_tokenizer(path), "auto", lambda: TEXTS)
    assert info.backend == "fastokens" and "ignore_merges off" in info.backend_reason
    strings = TEXTS + A.METASPACE_STRINGS + hard() + at + ["a zzq b", "zzqzzq", " zzq"]
    assert text_ids(info, strings) == hf_ids(path, strings)
