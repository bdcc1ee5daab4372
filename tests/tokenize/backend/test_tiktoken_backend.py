"""The tiktoken backend gives HF's ids exactly, or is refused.

Every comparison here is HF ``tokenizers`` (the reference) against the
converted tiktoken encoding on the same strings.
"""

from __future__ import annotations

import json
import os
import random

import pytest

pytest.importorskip("tiktoken")

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from packer.tokenize.backend import tiktoken_backend as T  # noqa: E402
from packer.tokenize.backend import tiktoken_check as TK  # noqa: E402
from packer.tokenize.backend import tiktoken_convert as TC  # noqa: E402
from packer.formats import Skip, discover, plan_slices, read_slice  # noqa: E402
from packer.tokenize import resolve_tokenizer  # noqa: E402

from tests.conftest import REPO, SAMPLE  # noqa: E402

SAMPLE_ONCE = (os.path.join(SAMPLE, "corpus.jsonl"), os.path.join(SAMPLE, "txt"))  # not the .gz/.zst/.parquet copies
REAL = os.path.join(REPO, "bench_out", "real", "real.jsonl")
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
U = {b: c for c, b in TC.byte_decoder().items()}  # byte -> its byte-level symbol


@pytest.fixture(autouse=True)
def _tiktoken_alone(monkeypatch):
    """These test tiktoken's own path: fastokens, where installed, would take auto's place
    (its tests: tests/tokenize/backend/test_fastokens_backend.py)."""
    monkeypatch.setenv("PACKER_FASTOKENS", "off")


def texts_of(*paths: str, limit: int | None = None) -> list[str]:
    out = []
    for sl, _ in plan_slices(discover(list(paths)).files, 1 << 30):
        for rec in read_slice(sl):
            if not isinstance(rec, Skip):
                out.append(rec.text)
                if limit is not None and len(out) >= limit:
                    return out
    return out


@pytest.fixture(scope="module")
def gpt2(gpt2_path):
    """(tokenizer.json as packer uses it, its conversion, the encoder, the HF tokenizer)."""
    js = resolve_tokenizer(gpt2_path).json
    conv = TC.convert(js)
    return js, conv, T.TiktokenEncoder(js, conv), Tokenizer.from_str(js)


def hf_ids(hf, texts):
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def tk_ids(enc, texts):
    return [a.tolist() for a in enc.encode_arrays(texts)]


# --------------------------------------------------------------------------
# GPT-2: converted, and identical.


def test_gpt2_converts_with_its_pattern_and_every_merge(gpt2):
    js, conv, _, _ = gpt2
    d = json.loads(js)
    assert conv.pat_str == TC.GPT2_PATTERN
    assert conv.added == ("<|endoftext|>",)
    # every vocabulary token but the added one is a rank, under its own id
    assert len(conv.ranks) == len(d["model"]["vocab"]) - 1
    b2 = TC.byte_decoder()
    for tok, i in list(d["model"]["vocab"].items())[::97]:
        if tok != "<|endoftext|>":
            assert conv.ranks[bytes(b2[c] for c in tok)] == i


def test_conversion_recorded_and_loaded_back_equal(gpt2, tmp_path, monkeypatch):
    """The recorded conversion (check_cache) is the same Conversion; a damaged record is ignored."""
    from packer.tokenize.backend import check_cache

    monkeypatch.setenv("PACKER_CACHE", str(tmp_path))
    _, conv, _, _ = gpt2
    assert check_cache.load_conversion("fp", False, ["x"]) is None
    check_cache.store_conversion("fp", False, ["x"], conv)
    assert check_cache.load_conversion("fp", False, ["x"]) == conv
    assert check_cache.load_conversion("fp", True, ["x"]) is None  # another setting: another record
    (rec,) = [p for p in tmp_path.rglob("*.ranks.npz")]
    rec.write_bytes(rec.read_bytes()[:1000])
    assert check_cache.load_conversion("fp", False, ["x"]) is None


def test_gpt2_same_ids_on_hard_strings(gpt2):
    _, conv, enc, hf = gpt2
    hard = TK.hard_strings(conv.added)
    r = TK.check(enc, hf, hard, "hard string")
    assert r.ok, r.difference
    assert r.texts == len(hard) and r.tokens > 100_000


def test_gpt2_same_ids_on_sample_data(gpt2):
    _, _, enc, hf = gpt2
    texts = texts_of(*SAMPLE_ONCE)
    assert len(texts) > 100
    ref = hf_ids(hf, texts)
    assert tk_ids(enc, texts) == ref
    assert sum(map(len, ref)) > 100_000


def test_gpt2_same_ids_on_real_text(gpt2):
    if not os.path.exists(REAL):
        pytest.skip("bench_out/real/real.jsonl not present (python bench/real_corpus.py bench_out/real --mb 60)")
    _, _, enc, hf = gpt2
    texts = texts_of(REAL, limit=120)  # all of it: bench/tokenizer_bench.py --check
    assert tk_ids(enc, texts) == hf_ids(hf, texts)


def test_special_token_literal_is_the_special_token_as_in_hf(gpt2):
    """HF cuts an added token's literal string out of the text and gives its id,
    with add_special_tokens=False too; so must the backend."""
    _, _, enc, hf = gpt2
    texts = ["a<|endoftext|>b", "<|endoftext|>", "x <|endoftext|><|endoftext|> y", "<|endoftext|", "<|ENDOFTEXT|>"]
    ref = hf_ids(hf, texts)
    eot = hf.token_to_id("<|endoftext|>")  # 50256 in the real GPT-2
    assert eot in ref[0] and ref[1] == [eot] and ref[2].count(eot) == 2
    assert eot not in ref[3] and eot not in ref[4]
    before = enc.to_hf
    assert tk_ids(enc, texts) == ref
    assert enc.to_hf - before == 3  # the three holding the literal went to HF, the look-alikes did not


def test_unencodable_text_fails_in_both(gpt2):
    _, _, enc, hf = gpt2
    with pytest.raises(Exception):
        hf.encode_batch(["a\ud800b"], add_special_tokens=False)
    with pytest.raises(Exception):
        enc.encode_arrays(["ok", "a\ud800b"])
    r = TK.check(enc, hf, ["fine", "a\udc80b", "fine too"], "t")
    assert r.ok and r.texts == 3


def test_encode_flat_is_the_arrays_back_to_back_with_eos(gpt2):
    _, _, enc, hf = gpt2
    texts = texts_of(*SAMPLE_ONCE, limit=50) + ["a<|endoftext|>b", " "]
    ref = hf_ids(hf, texts)
    eot = hf.token_to_id("<|endoftext|>")
    ids, lengths = enc.encode_flat(texts, eos=eot)
    assert lengths.tolist() == [len(r) + 1 for r in ref]
    assert ids.tolist() == [i for r in ref for i in r + [eot]]
    ids, lengths = enc.encode_flat(texts, eos=(eot, 7), prefix=(3,))  # a template's ids around each text
    assert ids.tolist() == [i for r in ref for i in [3] + r + [eot, 7]]
    assert lengths.tolist() == [len(r) + 3 for r in ref]
    ids, lengths = enc.encode_flat(texts, eos=None)
    assert ids.tolist() == [i for r in ref for i in r] and lengths.tolist() == [len(r) for r in ref]
    ids, lengths = enc.encode_flat([], eos=1)
    assert len(ids) == 0 and len(lengths) == 0


def test_llama3_style_split_pattern_and_all_splits_merges(gpt2):
    """A tokenizer converted from tiktoken (Llama-3 style): a Split regex, then
    ByteLevel without its own regex, every split of every token listed as a
    merge, whole-word lookup on. Accepted, and identical."""
    js, _, _, _ = gpt2
    d = json.loads(js)
    vocab = d["model"]["vocab"]
    merges = []
    for t, r in vocab.items():
        if len(t) > 1 and t != "<|endoftext|>":
            local = sorted(((t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in vocab and t[k:] in vocab),
                           key=lambda p: (vocab[p[0]], vocab[p[1]]))
            merges += [(r, a, b) for a, b in local]
    merges.sort(key=lambda m: m[0])
    d["model"]["merges"] = [[a, b] for _, a, b in merges]
    d["model"]["ignore_merges"] = True
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    js3 = json.dumps(d)
    conv = TC.convert(js3)
    assert conv.pat_str == LLAMA3_PATTERN
    enc, hf = T.TiktokenEncoder(js3, conv), Tokenizer.from_str(js3)
    r = TK.check(enc, hf, TK.hard_strings(conv.added) + texts_of(*SAMPLE_ONCE, limit=60), "text")
    assert r.ok, r.difference


# --------------------------------------------------------------------------
# Refusals: each names its reason, and where the reason is about merges the
# refused conversion would really have given other ids.


def byte_level_json(merges: list[tuple[str, str]], extra: list[str], **model) -> str:
    """A byte-level BPE over all 256 bytes (ids 0..255), then ``extra`` tokens in order."""
    vocab = {U[b]: b for b in range(256)}
    for t in extra:
        vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, **model))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()


def naive(js: str) -> T.TiktokenEncoder:
    """The conversion without its checks: every vocabulary token a rank, under its id."""
    d = json.loads(js)
    b2 = TC.byte_decoder()
    ranks = {bytes(b2[c] for c in t): i for t, i in d["model"]["vocab"].items()}
    return T.TiktokenEncoder(js, TC.Conversion(TC._pattern(d["pre_tokenizer"]), ranks, (), len(ranks), ""))


def test_refuses_wordpiece():
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    with pytest.raises(TC.NotExpressible, match="WordPiece"):
        TC.convert(tok.to_str())


def test_refuses_a_normalizer_that_changes_text():
    d = json.loads(byte_level_json([], []))
    d["normalizer"] = {"type": "Lowercase"}
    with pytest.raises(TC.NotExpressible, match="normalizer Lowercase"):
        TC.convert(json.dumps(d))
    d["normalizer"] = {"type": "Sequence", "normalizers": []}  # a no-op is fine
    TC.convert(json.dumps(d))


@pytest.mark.parametrize("change, reason", [
    ({"pre_tokenizer": {"type": "Whitespace"}}, "pre-tokenizer Whitespace"),
    ({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}}, "prefix space"),
    ({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}}, "one piece"),
    ({"model.dropout": 0.1}, "dropout"),
    ({"model.continuing_subword_prefix": "##"}, "continuing_subword_prefix"),
    ({"model.byte_fallback": True}, "byte_fallback"),
    ({"post_processor": {"type": "SomethingNew"}}, "post-processor"),
])
def test_refuses_what_tiktoken_cannot_do(change, reason):
    d = json.loads(byte_level_json([], []))
    for k, v in change.items():
        if k.startswith("model."):
            d["model"][k[6:]] = v
        else:
            d[k] = v
    with pytest.raises(TC.NotExpressible, match=reason):
        TC.convert(json.dumps(d))


def test_refuses_a_vocabulary_that_is_not_byte_level():
    d = json.loads(byte_level_json([], []))
    del d["model"]["vocab"][U[ord("a")]]
    with pytest.raises(TC.NotExpressible, match="256 byte-level"):
        TC.convert(json.dumps(d))


def ids_check(js: str, sample=None):
    """What ``choose`` decides on: the hard strings (or, for the small alphabets of the random
    tokenizers, ``sample`` in their place: the input sample's step) and the suspects' strings."""
    conv = TC.convert(js)
    enc = T.TiktokenEncoder(js, conv)
    base = TK.hard_strings(conv.added) if sample is None else sample
    return conv, TK.check(enc, Tokenizer.from_str(js), base + TK.suspect_strings(conv.suspects), "h")


def test_merges_out_of_id_order_are_suspects_and_the_ids_refuse_them():
    # "ab" is merged first but has the higher id: HF gives [ab][c], tiktoken [a][bc].
    js = byte_level_json([("a", "b"), ("b", "c")], ["bc", "ab"])
    conv, r = ids_check(js)
    assert conv.suspects == ("ab", "bc")
    hf = Tokenizer.from_str(js)
    assert tk_ids(naive(js), ["abc"]) != hf_ids(hf, ["abc"])
    assert not r.ok  # "abc" is one of the strings built around "ab"


def test_a_token_its_merges_do_not_rebuild_is_a_suspect_and_the_ids_refuse_it():
    # bc (256) merges before ab (257); then ab+c never meets: HF's "abc" is [a][bc],
    # tiktoken would take the piece "abc" whole (id 258).
    js = byte_level_json([("b", "c"), ("a", "b"), ("ab", "c")], ["bc", "ab", "abc"])
    conv, r = ids_check(js)
    assert "abc" in conv.suspects and not r.ok
    hf = Tokenizer.from_str(js)
    assert hf_ids(hf, ["abc"]) == [[97, 256]]
    assert tk_ids(naive(js), ["abc"]) == [[258]]


def test_refuses_a_token_no_merge_makes_when_whole_words_are_looked_up():
    js = byte_level_json([("a", "b")], ["ab", "xyz"], ignore_merges=True)
    with pytest.raises(TC.NotExpressible, match="made by no merge"):
        TC.convert(js)
    # without the whole-word lookup HF never produces it: left out, and identical
    js = byte_level_json([("a", "b")], ["ab", "xyz"])
    conv = TC.convert(js)
    assert b"xyz" not in conv.ranks
    texts = ["xyz abxyz ab", "xyzxyz"]
    assert tk_ids(T.TiktokenEncoder(js, conv), texts) == hf_ids(Tokenizer.from_str(js), texts)


# --------------------------------------------------------------------------
# The theory, tested: random byte-level BPEs, trained and made up. Whatever
# ``convert`` accepts must give HF's ids on random strings.


def random_json(rng: random.Random) -> str:
    if rng.random() < 0.5:  # trained by HF, then maybe rewritten as every-split merges (tiktoken style)
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tr = trainers.BpeTrainer(vocab_size=256 + rng.randint(5, 80), show_progress=False,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(["".join(rng.choice("aabbcd  ") for _ in range(rng.randint(5, 50))) for _ in range(200)], tr)
        d = json.loads(tok.to_str())
        if rng.random() < 0.5:
            v = d["model"]["vocab"]
            ms = sorted(((r, t[:k], t[k:]) for t, r in v.items() for k in range(1, len(t)) if t[:k] in v and t[k:] in v),
                        key=lambda m: (m[0], v[m[1]], v[m[2]]))
            d["model"]["merges"] = [[a, b] for _, a, b in ms]
            d["model"]["ignore_merges"] = rng.random() < 0.5
        return json.dumps(d)
    vocab_extra, merges, toks = [], [], list("abc")
    for _ in range(rng.randint(1, 30)):  # made up: random pairs, some tokens made twice
        a, b = rng.choice(toks), rng.choice(toks)
        if len(a + b) > 7:
            continue
        if a + b in vocab_extra:
            if (a, b) not in merges:
                merges.append((a, b))
            continue
        vocab_extra.append(a + b)
        toks.append(a + b)
        merges.append((a, b))
    if rng.random() < 0.5:
        merges.sort(key=lambda m: vocab_extra.index(m[0] + m[1]))
    return byte_level_json(merges, vocab_extra, ignore_merges=rng.random() < 0.3)


def test_whatever_is_accepted_is_identical_on_random_tokenizers():
    rng = random.Random(1234)
    accepted = refused = proven = 0
    for _ in range(120):
        js = random_json(rng)
        sample = ["".join(rng.choice("aabbcd  ") for _ in range(rng.randint(1, 50))) for _ in range(100)]
        try:
            conv, pre = ids_check(js, sample)  # the conditions, then the ids on a sample and the suspects' strings
        except TC.NotExpressible:
            refused += 1
            continue
        if not pre.ok:
            refused += 1
            continue
        accepted += 1
        proven += not conv.suspects
        texts = ["".join(rng.choice("aabbcd  ") for _ in range(rng.randint(1, 50))) for _ in range(150)]
        r = TK.check(T.TiktokenEncoder(js, conv), Tokenizer.from_str(js), texts, "random text")
        assert r.ok, (r.difference, js)
    assert accepted > 40 and refused > 5 and proven > 30  # every path was exercised


# --------------------------------------------------------------------------
# In the build: chosen automatically, said in the manifest, same shards.


def shard_bytes(out: str) -> dict[str, bytes]:
    d = os.path.join(out, "shards")
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def manifest(out: str) -> dict:
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def test_build_shards_identical_whichever_backend(tmp_path, gpt2_path):
    from packer import BuildConfig, build

    outs = {}
    for backend, workers in [("hf", 1), ("auto", 1), ("tiktoken", 2)]:
        out = str(tmp_path / f"{backend}{workers}")
        build(BuildConfig.of(inputs=(SAMPLE,), out=out, seq_len=512, tokenizer=gpt2_path, workers=workers,
                          unit_bytes=1 << 20, tokenizer_backend=backend))
        outs[backend] = out
    ref = shard_bytes(outs["hf"])
    assert len(ref) > 1
    for backend in ("auto", "tiktoken"):
        assert shard_bytes(outs[backend]) == ref, backend
    m = {b: manifest(o) for b, o in outs.items()}
    assert m["hf"]["tokenizer"]["backend"] == "hf" and "asked for" in m["hf"]["tokenizer"]["backend_reason"]
    assert m["auto"]["tokenizer"]["backend"] == "tiktoken"
    assert "same ids as HF" in m["auto"]["tokenizer"]["backend_reason"]
    # the backend is not a setting: fingerprint and settings are the same, so --resume may switch
    assert m["hf"]["settings"] == m["auto"]["settings"] == m["tiktoken"]["settings"]
    assert m["hf"]["shards"] == m["auto"]["shards"]


def test_resume_with_the_other_backend_is_allowed_and_identical(tmp_path, gpt2_path):
    from packer import BuildConfig, build

    out = str(tmp_path / "out")
    cfg = BuildConfig.of(inputs=(SAMPLE,), out=out, seq_len=256, tokenizer=gpt2_path, workers=1, unit_bytes=1 << 20,
                      tokenizer_backend="hf")
    build(cfg)
    ref = shard_bytes(out)
    for name in sorted(os.listdir(os.path.join(out, "units")))[1::2]:  # lose every other unit
        os.unlink(os.path.join(out, "units", name))
    os.unlink(os.path.join(out, "manifest.json"))
    res = build(cfg.but(resume=True, tokenizer_backend="tiktoken"))
    assert res.units_run > 0 and res.units_skipped > 0
    assert shard_bytes(out) == ref
    assert res.manifest["tokenizer"]["backend"] == "tiktoken"


def test_real_text_build_identical(tmp_path, gpt2_path):
    if not os.path.exists(REAL):
        pytest.skip("bench_out/real/real.jsonl not present")
    from packer import BuildConfig, build

    from tests.conftest import write_jsonl

    src = write_jsonl(tmp_path / "real.jsonl", texts_of(REAL, limit=60))
    shards = []
    for backend in ("hf", "auto"):
        out = str(tmp_path / backend)
        res = build(BuildConfig.of(inputs=(src,), out=out, seq_len=2048, tokenizer=gpt2_path, workers=1, unit_bytes=200_000,
                                tokenizer_backend=backend))
        assert res.manifest["tokenizer"]["backend"] == ("hf" if backend == "hf" else "tiktoken")
        shards.append(shard_bytes(out))
    assert len(shards[0]) > 1 and shards[0] == shards[1]


def test_auto_falls_back_to_hf_with_a_note_when_tiktoken_is_missing(tmp_path, gpt2_path, monkeypatch):
    import sys

    from packer import BuildConfig, build

    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import tiktoken -> ImportError
    res = build(BuildConfig.of(inputs=(os.path.join(SAMPLE, "txt"),), out=str(tmp_path / "o"), seq_len=128,
                            tokenizer=gpt2_path, workers=1))
    assert res.manifest["tokenizer"]["backend"] == "hf"
    notes = [n for n in res.notes if "tokenizer backend" in n]
    assert len(notes) == 1 and "not installed" in notes[0] and "\n" not in notes[0]


def gap_tokenizer(tmp_path, gap: str, gpt2_path: str) -> str:
    """GPT-2 with a Split pattern that matches no ``gap``: HF keeps that
    character as a piece of its own, tiktoken drops it."""
    d = json.loads(resolve_tokenizer(gpt2_path).json)
    pat = TC.GPT2_PATTERN.replace(r" ?\p{L}+", r" ?[^\P{L}" + gap + "]+").replace(r"[^\s\p{L}\p{N}]", r"[^\s\p{L}\p{N}" + gap + "]")
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(d))
    return str(path)


def test_a_difference_on_the_input_sample_falls_back_to_hf(tmp_path, gpt2_path, monkeypatch):
    from packer import BuildConfig, build

    tok = gap_tokenizer(tmp_path, "é", gpt2_path)  # sample_data holds "café" and "naïve"
    monkeypatch.setattr(T, "hard_strings", lambda added=(): ["plain text"])  # let it reach the input sample
    T._STATIC.clear()
    res = build(BuildConfig.of(inputs=(os.path.join(SAMPLE, "txt"),), out=str(tmp_path / "o"), seq_len=256,
                            tokenizer=tok, workers=1))
    T._STATIC.clear()
    t = res.manifest["tokenizer"]
    assert t["backend"] == "hf"
    assert "other ids than HF on input text" in t["backend_reason"]
    assert any("tokenizer backend" in n for n in res.notes)


def test_a_difference_on_the_hard_strings_is_caught(tmp_path, gpt2_path):
    from packer.tokenize import choose_backend

    info = resolve_tokenizer(gap_tokenizer(tmp_path, "é", gpt2_path))
    got = choose_backend(info, "auto", lambda: ["no sample needed"])
    assert got.backend == "hf" and "other ids than HF on hard string" in got.backend_reason


def cl100k_form(js: str, pattern: str, behavior: str = "Removed", invert: bool = True) -> str:
    """``js`` with its pre-tokenizer written as GPT-3.5's cl100k tokenizer.json writes it: a Split
    on ``pattern`` whose matches are the pieces (Removed + invert), then ByteLevel without a regex."""
    d = json.loads(js)
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return json.dumps(d)


def test_the_removed_invert_split_of_gpt35_takes_the_fast_path(gpt2, tmp_path):
    """Issue 53.7: cl100k's pattern in the Removed + invert form is the tiktoken encoder, chosen
    by ``choose_backend`` and identical to HF on the hard strings and real text; Isolated's
    refusal reason is not hit."""
    from packer.tokenize import choose_backend

    js3 = cl100k_form(gpt2[0], LLAMA3_PATTERN)
    conv = TC.convert(js3)
    assert conv.pat_str == LLAMA3_PATTERN
    r = TK.check(T.TiktokenEncoder(js3, conv), Tokenizer.from_str(js3),
                 TK.hard_strings(conv.added) + texts_of(*SAMPLE_ONCE, limit=60), "text")
    assert r.ok, r.difference
    path = tmp_path / "tokenizer.json"
    path.write_text(js3)
    T._STATIC.clear()
    got = choose_backend(resolve_tokenizer(str(path)), "auto", lambda: texts_of(*SAMPLE_ONCE, limit=60))
    T._STATIC.clear()
    assert got.backend == "tiktoken", got.backend_reason


def test_removed_invert_drops_the_gaps_as_tiktoken_does(tmp_path, gpt2_path):
    """Where the pattern leaves text unmatched, Isolated keeps it as a piece (HF and tiktoken
    differ: test_a_difference_on_the_hard_strings_is_caught) and Removed + invert drops it, as
    tiktoken does: the same ids on text full of the gap character."""
    isolated = open(gap_tokenizer(tmp_path, "é", gpt2_path)).read()
    js = cl100k_form(isolated, json.loads(isolated)["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"])
    conv = TC.convert(js)
    texts = ["café naïve résumé", "ééé é", "plain text"] + TK.hard_strings(conv.added)
    r = TK.check(T.TiktokenEncoder(js, conv), Tokenizer.from_str(js), texts, "h")
    assert r.ok, r.difference
    assert Tokenizer.from_str(js).encode("café").ids == Tokenizer.from_str(js).encode("caf").ids  # the gap dropped


@pytest.mark.parametrize("behavior, invert", [("Removed", False), ("Isolated", True), ("MergedWithPrevious", False)])
def test_other_split_forms_are_refused(gpt2, behavior, invert):
    with pytest.raises(TC.NotExpressible, match=f"Split behaviour {behavior}/invert={invert}"):
        TC.convert(cl100k_form(gpt2[0], LLAMA3_PATTERN, behavior, invert))


def test_a_pattern_tiktoken_cannot_compile_is_refused():
    d = json.loads(byte_level_json([], []))
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\X"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    js = json.dumps(d)
    Tokenizer.from_str(js).encode("Oniguruma takes it")
    with pytest.raises(TC.NotExpressible, match="regex engine rejects"):
        T.TiktokenEncoder(js, TC.convert(js))


def test_forcing_tiktoken_where_it_cannot_be_exact_is_one_clear_error(tmp_path, gpt2_path):
    from packer import PackerError
    from packer.tokenize import choose_backend

    with pytest.raises(PackerError, match="needs a --tokenizer"):
        choose_backend(resolve_tokenizer(None), "tiktoken")
    d = json.loads(byte_level_json([], []))
    d["normalizer"] = {"type": "Lowercase"}
    path = tmp_path / "lower.json"
    path.write_text(json.dumps(d))
    info = resolve_tokenizer(str(path), eos=False)
    with pytest.raises(PackerError, match="--tokenizer-backend tiktoken: tiktoken cannot express .*normalizer Lowercase"
                                          ".*nothing was built"):
        choose_backend(info, "tiktoken")
    assert choose_backend(info, "auto").backend == "hf"  # auto: HF, and no notice (nothing surprising)
    assert choose_backend(info, "auto").notes == info.notes
    with pytest.raises(PackerError, match="unknown --tokenizer-backend"):
        choose_backend(info, "fast")


def test_cli_says_which_backend_ran(tmp_path, gpt2_path):
    from click.testing import CliRunner

    from packer.cli import main

    r = CliRunner().invoke(main, ["build", os.path.join(SAMPLE, "txt"), str(tmp_path / "o"), "--tokenizer", gpt2_path,
                                  "--seq-len", "128", "--workers", "1", "--tokenizer-backend", "hf"])
    assert r.exit_code == 0, r.output
    assert "backend         hf: asked for (--tokenizer-backend hf)" in r.output
    r = CliRunner().invoke(main, ["build", os.path.join(SAMPLE, "txt"), str(tmp_path / "p"), "--tokenizer-backend", "x"])
    assert r.exit_code == 2 and "--tokenizer-backend" in r.output


@pytest.mark.parametrize("added", [
    tuple(f"<|reserved_special_token_{i}|>" for i in range(40)) + ("<|begin_of_text|>", "<|end_of_text|>"),
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    ("<s>", "</s>", "[MASK]", "<pad>", "|x|"),  # no common prefix: the regex alone
])
def test_the_added_token_scan_finds_exactly_the_texts_that_hold_one(added):
    from packer.tokenize.backend.tiktoken_backend import _AddedScan

    rng = random.Random(7)
    scan = _AddedScan(added)
    pieces = ["a", " ", "<", "|", "<|", "[", "]", "x", "\n", "é"] + [a[: rng.randint(1, len(a))] for a in added]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.2:
            text += rng.choice(added)
        assert scan(text) == any(a in text for a in added), text
