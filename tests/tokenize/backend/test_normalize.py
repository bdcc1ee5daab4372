"""The fast backend normalizes (NFC / NFKC) exactly as HF does: every code point, every base + mark pair.

A Qwen-like byte-level BPE (the Qwen2 split pattern, an NFC or NFKC normalizer, a few merges) is built
here; HF ``tokenizers`` is the reference. packer/tokenize/backend/normalize.py skips the normalizer for a text
whose characters are all boundaries by its table: the sweeps put those characters in texts of their own,
so the skip is what runs on them, and compare the ids with HF's.

The default run checks the ids of one item in STEP of each sweep (part "sample", from a start seeded by the
form: conftest.one_in); the rest (part "rest") is marked full (issue 54: ``pytest -m full``, PACKER_TEST_FULL=1).
The two parts together are the whole sweep; the sweeps' counts and the normalizer's no-op on every inert pair
are asserted in both parts, on the whole lists.
"""

from __future__ import annotations

import json
import unicodedata
from functools import lru_cache

import numpy as np
import pytest

pytest.importorskip("tiktoken")

from tokenizers import Tokenizer, normalizers  # noqa: E402

from packer.tokenize.backend import normalize as N  # noqa: E402
from packer.tokenize.backend import tiktoken_backend as T  # noqa: E402
from packer.tokenize.backend import tiktoken_convert as TC  # noqa: E402

from tests.conftest import one_in  # noqa: E402

QWEN_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
U = {b: c for c, b in TC.byte_decoder().items()}  # byte -> its byte-level symbol
STEP = 8  # the default run's share of each sweep: one in 8 (the code point sweep took 37 s whole under NFC)
PARTS = pytest.mark.parametrize("part", ["sample", "rest"])


def in_full_sweep(item) -> bool:
    """(tests/conftest.py marks these ``full``.) The sweeps' rest: what the default run's sample leaves out."""
    return getattr(getattr(item, "callspec", None), "params", {}).get("part") == "rest"


def qwen_like(form: str) -> str:
    """A byte-level BPE with Qwen2's pre-tokenizer and ``form`` as its normalizer; merges on UTF-8 lead bytes."""
    vocab = {U[b]: i for i, b in enumerate(range(256))}
    merges = []
    for a, b in [(" ", "a"), ("\xcc", "\x81"), ("\xe1", "\xb8"), ("a", "1"), ("\xf0", "\x91")]:
        pa, pb = "".join(U[x] for x in a.encode("latin-1")), "".join(U[x] for x in b.encode("latin-1"))
        vocab[pa + pb] = len(vocab)
        merges.append([pa, pb])
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": form},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}})


@pytest.fixture(scope="module", params=["NFC", "NFKC"])
def pair(request):
    """(form, the fast encoder, the HF tokenizer, the normalizer's boundary table) for ``form``."""
    js = qwen_like(request.param)
    enc = T.TiktokenEncoder(js, TC.convert(js))
    assert enc.conv.normalize == request.param
    return request.param, enc, Tokenizer.from_str(js), N.table(request.param)


def assert_same_ids(enc, hf, texts):
    ref = [e.ids for e in hf.encode_batch_fast(texts, add_special_tokens=False)]
    got = enc.encode_lists(texts)
    bad = next((i for i, (r, g) in enumerate(zip(ref, got)) if r != g), None)
    assert bad is None, (texts[bad][:80], ref[bad][:12], got[bad][:12])


def chunks(items: list[str], per: int, sep: str = " ") -> list[str]:
    return [sep.join(items[i:i + per]) for i in range(0, len(items), per)]


@lru_cache(maxsize=1)
def python_marks() -> tuple[int, ...]:
    return tuple(c for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF
                 and (unicodedata.combining(chr(c)) or unicodedata.category(chr(c))[0] == "M"))


def marks(table) -> list[int]:
    """Every combining mark by either library: Python's category M or ccc, or not a boundary by tokenizers'
    among the code points the table probes (the others count as not boundaries without being marks; taking
    them all made the pair sweep 850k marks long and a minute slow)."""
    probed = {int(c) for lo, hi in N._PROBED for c in np.flatnonzero(table[lo:hi]) + lo}
    return sorted(set(python_marks()) | probed - set(range(0xD800, 0xE000)))


@lru_cache(maxsize=1)
def python_pairs() -> tuple[str, ...]:
    """Every canonical pair in Python's tables (what it composes), as the two characters."""
    out = []
    for c in range(0x80, 0x110000):
        d = unicodedata.decomposition(chr(c)).split()
        if len(d) == 2 and not d[0].startswith("<"):
            out.append(chr(int(d[0], 16)) + chr(int(d[1], 16)))
    return tuple(out)


def bases() -> list[int]:
    """Printable ASCII and every first half of a canonical pair in Python's tables (tokenizers' are in ``marks``)."""
    return sorted(set(range(0x20, 0x7F)) | {ord(p[0]) for p in python_pairs()})


@PARTS
def test_every_code_point_gives_hf_ids(pair, part):
    """Every assigned code point (by Python's tables, or known to tokenizers' normalizer), in a letter
    and a digit context; the table's boundaries in texts of their own (the normalizer is skipped there).
    ``part``: one code point in STEP of each kind (the default run), or the others (full)."""
    form, enc, hf, table = pair
    cps = [c for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF
           and (table[c] or unicodedata.category(chr(c)) not in ("Cn", "Co"))]
    skipped = [f"a{chr(c)} {chr(c)}1" for c in cps if not table[c]]
    normalized = [f"a{chr(c)} {chr(c)}1" for c in cps if table[c]]
    assert len(skipped) > 100_000 and len(normalized) > 2_000
    skipped, normalized = (one_in(x, STEP, f"code-points-{form}", part) for x in (skipped, normalized))
    texts = chunks(skipped, 256) + chunks(normalized, 64)
    assert all(not table[np.frombuffer(t.encode("utf-32-le"), np.uint32)].any() for t in chunks(skipped, 256))
    assert_same_ids(enc, hf, texts)


@PARTS
def test_every_base_and_combining_mark_pair_gives_hf_ids(pair, part):
    """Every mark after every base. The pairs of two boundaries (by the table): unchanged by HF's normalizer,
    all of them, and ids-checked (a seventh of them) in texts the normalizer skips. The other marks: after
    letters of five scripts, and every canonical pair of both libraries (Python's decompositions, and NFD
    by tokenizers of every character its table marks), ids-checked through the normalizer. ``part``: the ids
    of one item in STEP of each list (the default run), or the others (full); the no-op check is whole in both."""
    form, enc, hf, table = pair
    ms, bs = marks(table), bases()
    inert_marks = [chr(m) for m in ms if not table[m]]
    inert = [chr(b) + m for b in bs if not table[b] for m in inert_marks]
    assert len(inert) > 100_000
    # what the skip relies on, for all of them at once: normalizing changes none of them
    nf = getattr(normalizers, form)().normalize_str
    assert nf("\x00".join(inert)) == "\x00".join(inert)
    composing = [b + chr(m) for b in ("a", "\u05d0", "\u0915", "\u1100", "\uac00") for m in ms if table[m]]
    nfd = normalizers.NFD().normalize_str
    by_nfd = [nfd(chr(c)) for c in np.flatnonzero(table).tolist() if not 0xD800 <= c <= 0xDFFF]
    by_python = list(python_pairs())  # U+11935 U+11930 among them (Python composes it, tokenizers does not)
    inert, composing, pairs = (one_in(x, STEP, f"pairs-{form}", part)
                               for x in (inert[::7], composing, by_nfd + by_python))
    texts = chunks(inert, 512, "") + chunks(composing, 256) + chunks(pairs, 128)
    assert_same_ids(enc, hf, texts)


def test_the_issue_reproduction_and_where_python_differs(pair):
    """U+11935 U+11930 composes in Python 3.11's tables, not in tokenizers': the fast backend gives HF's ids."""
    form, enc, hf, _ = pair
    texts = ["x" * 5000 + " \U00011935\U00011930", "\U00011935\U00011930", "e\u0301" * 50, "\u1100\u1161\u11a8"]
    assert_same_ids(enc, hf, texts)
    norm, nf = N.Normalizer(form), getattr(normalizers, form)().normalize_str
    assert [norm(t) for t in texts] == [nf(t) for t in texts]


def fake_table(form: str) -> np.ndarray:
    t = np.zeros(0x110000, dtype=bool)
    t[0x300:0x370] = True
    return t


def test_the_table_is_recorded_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path))
    monkeypatch.setattr(N, "_TABLES", {})
    monkeypatch.setattr(N, "_not_boundaries", fake_table)
    first = N.table("NFC")
    assert list((tmp_path / "normalizers").iterdir())
    monkeypatch.setattr(N, "_TABLES", {})
    monkeypatch.setattr(N, "_not_boundaries", lambda form: pytest.fail("worked out again"))
    assert np.array_equal(N.table("NFC"), first)


def test_a_damaged_table_record_is_worked_out_again(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path))
    monkeypatch.setattr(N, "_TABLES", {})
    monkeypatch.setattr(N, "_not_boundaries", fake_table)
    first = N.table("NFC").copy()
    for f in (tmp_path / "normalizers").iterdir():
        f.write_bytes(f.read_bytes()[:100])
    monkeypatch.setattr(N, "_TABLES", {})
    monkeypatch.setattr(N, "_not_boundaries", lambda form: fake_table(form) | (np.arange(0x110000) == 0x41))
    assert N.table("NFC")[0x41] and np.array_equal(N.table("NFC") & ~(np.arange(0x110000) == 0x41), first)


def test_lone_surrogates_are_left_for_the_encoder_to_refuse(pair):
    form, enc, hf, _ = pair
    assert N.Normalizer(form)("a\ud800b") == "a\ud800b"
    with pytest.raises(Exception):
        hf.encode("a\ud800b")
    assert enc.encode_lists(["ok", "é"]) == [e.ids for e in hf.encode_batch(["ok", "é"], add_special_tokens=False)]
