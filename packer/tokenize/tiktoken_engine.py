"""tiktoken as the engine for byte-level BPE tokenizer.json files, where it gives HF's ids exactly.

tiktoken runs the same algorithm as HF ``tokenizers`` for byte-level BPE (a
regex cuts the text into pieces, each piece's UTF-8 bytes are merged pairwise,
lowest rank first) about 4x faster. ``convert`` decides whether a
tokenizer.json can be expressed in it *exactly* and builds the pieces of a
``tiktoken.Encoding`` in memory (nothing downloaded, nothing written);
``TiktokenEncoder`` encodes with it; ``check`` compares it with HF on a fixed
set of hard strings plus a sample of the input, and the build falls back to
HF on any difference.

Why the conversion is exact (the conditions ``convert`` checks):

- **Pieces.** No normalizer; the pre-tokenizer is ``ByteLevel(use_regex=True)``
  (the GPT-2 pattern) or ``Split(regex, isolated) + ByteLevel(use_regex=False)``
  (the Llama-3 / Qwen family); no prefix space. The regex engines differ
  (Oniguruma in HF, fancy-regex in tiktoken), which is what the hard strings
  (every code point of the scripts in use, Unicode whitespace, contractions
  with case-folding look-alikes) and the input sample are there to catch.
- **Merges.** tiktoken merges the adjacent pair whose *concatenation* has the
  lowest rank (= token id), leftmost first; HF merges the adjacent pair that
  comes first in its merge list, leftmost first. ``convert`` requires
  (a) merge order = id order: each merge's result has an id no lower than the
  previous merge's (a token may have several merges, as in tokenizers
  converted from tiktoken), and (b) HF's merges alone turn every token's
  bytes into that one token. Then the two runs agree step by step. In any
  state HF reaches, two adjacent tokens x, y inside a piece were built from
  their own bytes only, so HF's run on t = x + y alone passes through
  [x][y]; by (b) it ends in [t], so (x, y) is one of HF's merges, and the
  same for every pair tiktoken could merge. Moreover HF's run on t has one
  last two-token state, so every pair that makes t, anywhere, is the same
  split: both sides pick the same lowest-ranked merge and break ties by
  position. (Tokens no merge makes are left out, as HF never produces them.)
- **Whole pieces.** tiktoken returns a piece that is itself a token as that
  token; HF does too (``ignore_merges``) or gets there by merging ((b)).
- **Added tokens.** HF cuts added tokens (``<|endoftext|>`` ...) out of the text
  wherever their literal string appears, with ``add_special_tokens=False``
  too, and tiktoken's ordinary encoding does not. A text that contains one
  (rare) is encoded by HF itself, as is a text Python cannot encode as UTF-8
  (lone surrogates: HF raises, as it would without tiktoken).

The token ids never depend on which engine ran, so neither do the shards.
"""

from __future__ import annotations

import json
import re
import unicodedata
from array import array
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from . import check_cache
from .tiktoken_check import _NEVER, CheckResult, check, hard_strings, suspect_strings  # noqa: F401 (re-exported)

# HF's ByteLevel(use_regex=True) pattern: the same string as tiktoken's gpt2/r50k.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

_NOOP_POST = {"ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing"}  # add nothing without special tokens


class NotExpressible(Exception):
    """The tokenizer.json cannot be run by tiktoken with HF's ids; ``str(e)`` says why (one line)."""


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the printable char that stands for each byte -> the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def readable(tok: str) -> str:
    """A byte-level token ('Ġthe') as the text it stands for (' the'), repr'd; bytes that are not
    whole UTF-8 characters shown as \\x escapes."""
    try:
        raw = tok.translate(_to_bytes_table()).encode("latin-1")
    except UnicodeEncodeError:
        return repr(tok)
    return repr(raw.decode("utf-8", "backslashreplace"))


@lru_cache(maxsize=1)
def _to_bytes_table() -> dict:
    """str.translate table: byte-level symbol -> the char whose latin-1 code is that byte."""
    return str.maketrans({c: chr(b) for c, b in byte_decoder().items()})


@dataclass(frozen=True)
class Conversion:
    """What a ``tiktoken.Encoding`` is built from, plus what stays with HF."""

    pat_str: str  # the split regex
    ranks: dict  # bytes -> token id, every token HF's BPE can produce
    added: tuple[str, ...]  # literal strings HF cuts out of the text: such a text is encoded by HF
    vocab_size: int  # ids are < vocab_size
    note: str  # how it was derived, for the manifest
    normalize: str | None = None  # "NFC" | "NFKC": applied to the text first, as HF's normalizer does
    suspects: tuple[str, ...] = ()  # tokens (as text) where the merge conditions fail: checked by ids (``suspect_strings``)


def _pattern(pre: dict | None) -> str:
    """The one regex that cuts text into pieces as ``pre`` does, or NotExpressible."""
    if pre is None:
        raise NotExpressible("no pre-tokenizer (tiktoken needs a split pattern)")
    kind = pre.get("type")
    if kind == "ByteLevel":
        if pre.get("add_prefix_space"):
            raise NotExpressible("ByteLevel pre-tokenizer adds a prefix space")
        if not pre.get("use_regex", True):
            raise NotExpressible("ByteLevel pre-tokenizer without a split pattern (whole text as one piece)")
        return GPT2_PATTERN
    if kind == "Sequence":
        steps = pre.get("pretokenizers") or []
        if len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel":
            split, bl = steps
            if bl.get("add_prefix_space") or bl.get("use_regex", True):
                raise NotExpressible("Split followed by a ByteLevel that splits again or adds a prefix space")
            pat = split.get("pattern") or {}
            if "Regex" not in pat:
                raise NotExpressible("Split on a plain string, not a regex")
            if split.get("behavior") != "Isolated" or split.get("invert"):
                raise NotExpressible(f"Split behaviour {split.get('behavior')}/invert={split.get('invert')} (only Isolated)")
            return pat["Regex"]
        if len(steps) == 1:
            return _pattern(steps[0])
        raise NotExpressible("pre-tokenizer sequence " + "+".join(str(s.get("type")) for s in steps))
    raise NotExpressible(f"pre-tokenizer {kind}")


def _noop_normalizer(norm: dict | None) -> bool:
    if norm is None:
        return True
    return norm.get("type") == "Sequence" and all(_noop_normalizer(n) for n in norm.get("normalizers") or [])


_FORMS = ("NFC", "NFKC")  # normalizers Python's unicodedata applies exactly as HF does (checked by ids, as all else)


def _normal_form(norm: dict | None) -> str | None:
    """None for no normalizer, "NFC"/"NFKC" for one of those alone (or in a Sequence of one);
    else NotExpressible (a normalizer tiktoken cannot apply first)."""
    if _noop_normalizer(norm):
        return None
    if norm.get("type") in _FORMS:
        return norm["type"]
    if norm.get("type") == "Sequence":
        steps = [n for n in norm.get("normalizers") or [] if not _noop_normalizer(n)]
        if len(steps) == 1 and steps[0].get("type") in _FORMS:
            return steps[0]["type"]
    raise NotExpressible(f"normalizer {norm.get('type')} changes the text in a way tiktoken cannot apply first")


def _noop_post(post: dict | None) -> bool:
    if post is None:
        return True
    if post.get("type") == "Sequence":
        return all(_noop_post(p) for p in post.get("processors") or [])
    return post.get("type") in _NOOP_POST


def convert(tokenizer_json: str, check_merges: bool = True, hf=None) -> Conversion:
    """Derive a tiktoken encoding from an HF tokenizer.json, or raise ``NotExpressible``.

    ``check_merges=False`` skips condition (b) of the module docstring (HF
    encodes every token once, ~0.2 s per 50k tokens): for a worker rebuilding
    a conversion the main process already checked. ``hf``: the loaded HF
    tokenizer, if at hand (saves loading it again).
    """
    try:
        d = json.loads(tokenizer_json)
    except ValueError as e:
        raise NotExpressible(f"not JSON ({e})") from None
    model = d.get("model") or {}
    if model.get("type") != "BPE":
        raise NotExpressible(f"model {model.get('type')}, not BPE")
    if model.get("dropout") not in (None, 0, 0.0):
        raise NotExpressible(f"BPE dropout {model['dropout']} (random merges)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise NotExpressible(f"BPE {key} {model[key]!r}")
    if model.get("byte_fallback"):
        raise NotExpressible("BPE byte_fallback (a SentencePiece-style vocabulary)")
    form = _normal_form(d.get("normalizer"))
    if not _noop_post(d.get("post_processor")):
        raise NotExpressible(f"post-processor {d['post_processor'].get('type')}")
    pat = _pattern(d.get("pre_tokenizer"))

    vocab: dict[str, int] = model.get("vocab") or {}
    b2 = byte_decoder()
    if any(c not in vocab for c in b2):
        raise NotExpressible("vocabulary lacks some of the 256 byte-level symbols (not a byte-level BPE)")
    if len(set(vocab.values())) != len(vocab):
        raise NotExpressible("vocabulary maps two tokens to one id")
    added = d.get("added_tokens") or []
    added_str = {a["content"] for a in added if a.get("content")}

    # Merges: every result's id should be no lower than the previous result's
    # (merge order = id order; a token may have several merges). Where that, or
    # condition (b), fails, the proof does not hold for that token: it becomes a
    # suspect, and the ids on strings built around it decide (``choose``).
    made_by: set[str] = set()
    suspects: list[str] = []
    last, last_tok = -1, ""
    for i, m in enumerate(model.get("merges") or []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        t = a + b
        if a not in vocab or b not in vocab or t not in vocab:
            raise NotExpressible(f"merge {i} ({a!r} {b!r}) names a token outside the vocabulary")
        r = vocab[t]
        if r < last:  # both sides of the inversion
            suspects += [t, last_tok]
        elif r > last:
            last, last_tok = r, t
        made_by.add(t)

    ranks: dict[bytes, int] = {}
    to_bytes = _to_bytes_table()
    for tok, i in vocab.items():
        if len(tok) == 1 or tok in made_by:
            try:
                ranks[tok.translate(to_bytes).encode("latin-1")] = i
            except UnicodeEncodeError:
                raise NotExpressible(f"token {tok!r} is not byte-level") from None
        elif model.get("ignore_merges") and tok not in added_str:
            # HF returns such a token for a piece that equals it, and tiktoken
            # would also build it out of two neighbours: refuse.
            raise NotExpressible(f"token {readable(tok)} (id {i}) is made by no merge while ignore_merges is on")
        # else: HF's merges never produce it, so tiktoken must not know it either

    if check_merges:
        own = hf.model if hf is not None and not model.get("ignore_merges") else None
        suspects += _tokens_merges_do_not_rebuild(d, [t for t in vocab if len(t) > 1 and t in made_by], own)

    vocab_size = max(max(vocab.values()), max((a["id"] for a in added), default=0)) + 1
    n_merges = len(model.get("merges") or [])
    note = (f"{'GPT-2 pattern' if pat == GPT2_PATTERN else 'Split pattern'}{', ' + form + ' first' if form else ''}, "
            f"{len(ranks)} ranks, {n_merges} merges"
            + (f", {len(set(suspects))} tokens outside the merge conditions checked by ids" if suspects else " in id order"))
    text_suspects = tuple(sorted({t.translate(to_bytes).encode("latin-1").decode("utf-8", "ignore") for t in suspects} - {""}))
    return Conversion(pat, ranks, tuple(sorted(added_str)), vocab_size, note, form, text_suspects)


def _merge_only_model_json(d: dict) -> str:
    """The tokenizer.json reduced to its BPE model, merges only (no whole-word shortcut)."""
    model = dict(d["model"])
    model["ignore_merges"] = False
    model["dropout"] = None
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                       "pre_tokenizer": None, "model": model, "post_processor": None, "decoder": None})


def _tokens_merges_do_not_rebuild(d: dict, tokens: list[str], model=None) -> list[str]:
    """Condition (b): the tokens whose bytes HF's merges alone do not turn into that token.
    ``model``: the tokenizer's own BPE model if it has no whole-word lookup."""
    if model is None:
        from tokenizers import Tokenizer

        model = Tokenizer.from_str(_merge_only_model_json(d)).model
    vocab = d["model"]["vocab"]
    out = []
    for t in tokens:  # already in byte-level symbols: straight to the BPE model, as one word
        got = model.tokenize(t)
        if len(got) != 1 or got[0].id != vocab[t]:
            out.append(t)
    return out


# --------------------------------------------------------------------------
# Encoding.


class TiktokenEncoder:
    """Encodes texts to HF's ids with tiktoken; the rare text tiktoken must not
    see (an added token's literal string inside, or not encodable as UTF-8)
    goes to HF. Single-threaded: the build runs one per core."""

    def __init__(self, tokenizer_json: str, conv: Conversion | None = None, hf=None, split_special: bool = False):
        import tiktoken

        self.split_special = split_special  # HF's encode_special_tokens, for the texts HF encodes
        self.conv = conv if conv is not None else convert(tokenizer_json, check_merges=False)
        self._json = tokenizer_json
        self._hf = hf  # loaded on first need
        try:
            # One special token that is never allowed: with none at all, tiktoken's
            # special-token search (an empty regex) stops at every character.
            enc = tiktoken.Encoding("packer-converted", pat_str=self.conv.pat_str, mergeable_ranks=self.conv.ranks,
                                    special_tokens={_NEVER: self.conv.vocab_size})
        except ValueError as e:  # fancy-regex does not take every pattern Oniguruma does
            raise NotExpressible(f"split pattern tiktoken's regex engine rejects ({str(e).splitlines()[0]})") from None
        # The Rust encoder, no Python wrapper per call. encode_to_tiktoken_buffer
        # with no special token allowed is encode_ordinary (a disallowed
        # special's literal is ordinary text) into a uint32 buffer: no Python ints.
        self._encode = enc._core_bpe.encode_ordinary
        self._buffer = getattr(enc._core_bpe, "encode_to_tiktoken_buffer", None)  # tiktoken >= 0.8
        if self._buffer is None:
            self._buffer = lambda text, allowed: array("I", self._encode(text))
        form = self.conv.normalize
        if form is not None:  # HF's NFC/NFKC normalizer, applied first (ASCII text is already normal)
            raw_encode, raw_buffer = self._encode, self._buffer
            norm = unicodedata.normalize
            self._encode = lambda t: raw_encode(t if t.isascii() else norm(form, t))
            self._buffer = lambda t, allowed: raw_buffer(t if t.isascii() else norm(form, t), allowed)
        self._allowed: frozenset = frozenset()
        self.to_hf = 0  # texts handed to HF so far
        added = self.conv.added
        if not added:
            self._needs_hf = lambda text: False
        elif len(added) <= 4:
            self._needs_hf = lambda text: any(a in text for a in added)
        else:  # one scan for all of them (sorted longest first, though any hit sends the text to HF)
            rx = re.compile("|".join(re.escape(a) for a in sorted(added, key=len, reverse=True)))
            self._needs_hf = lambda text: rx.search(text) is not None

    def _hf_encode(self, texts: list[str]) -> list[list[int]]:
        if self._hf is None:
            from tokenizers import Tokenizer

            self._hf = Tokenizer.from_str(self._json)
        self._hf.encode_special_tokens = self.split_special  # also when shared: the same build's setting
        self.to_hf += len(texts)
        return [e.ids for e in self._hf.encode_batch(texts, add_special_tokens=False)]

    def _each(self, texts: list[str], encode_one) -> list:
        """``encode_one(text)`` for each text tiktoken runs exactly; the others (``_needs_hf``, or
        text it cannot take) go to HF in one batch and come back as lists of ids. In order."""
        needs_hf = self._needs_hf
        out: list = []
        hf_at = []
        for i, t in enumerate(texts):
            if not needs_hf(t):
                try:
                    out.append(encode_one(t))
                    continue
                except UnicodeEncodeError:
                    pass
            hf_at.append(i)
            out.append(None)
        if hf_at:
            for i, ids in zip(hf_at, self._hf_encode([texts[i] for i in hf_at])):
                out[i] = ids
        return out

    def encode_lists(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids (no EOS)."""
        return self._each(texts, self._encode)

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """One uint32 array of ids per text (no EOS)."""
        return [np.array(ids, dtype=np.uint32) for ids in self.encode_lists(texts)]

    def encode_flat(self, texts: list[str], eos, prefix: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
        """(ids, lengths): every text's ``prefix``, its ids, then ``eos`` (an id, a tuple of ids
        or None), back to back, uint32; lengths int64 (len(texts),), prefix and suffix included."""
        buffer, allowed = self._buffer, self._allowed
        arrays = self._each(texts, lambda t: np.frombuffer(buffer(t, allowed), dtype=np.uint32))
        e = np.array([] if eos is None else [eos] if isinstance(eos, int) else list(eos), dtype=np.uint32)
        p = np.array(list(prefix), dtype=np.uint32)
        parts: list = []
        for a in arrays:
            if len(p):
                parts.append(p)
            parts.append(a if isinstance(a, np.ndarray) else np.array(a, dtype=np.uint32))  # a list: from HF
            parts.append(e)
        step = 3 if len(p) else 2
        lengths = np.fromiter(map(len, parts[step - 2::step]), dtype=np.int64, count=len(texts)) + len(e) + len(p)
        return (np.concatenate(parts) if parts else np.zeros(0, np.uint32)), lengths


# --------------------------------------------------------------------------
# Choosing the backend for a build.

BACKENDS = ("auto", "hf", "tiktoken")
SAMPLE_DOCS = 200  # input texts compared before a build uses tiktoken
SAMPLE_CHARS = 1 << 18  # ... at most this much text in all
SAMPLE_TEXT_CHARS = 1 << 12  # ... and at most this much of any one text (a prefix is as good a test)

_ENCODERS: dict = {}  # fingerprint -> TiktokenEncoder (one entry): the build's Encoder reuses the checked one
_STATIC: dict = {}  # fingerprint -> (TiktokenEncoder, hard-string CheckResult) or the reason it failed


@dataclass(frozen=True)
class Choice:
    backend: str  # "hf" | "tiktoken"
    reason: str  # one line: why
    fallback: bool = False  # auto wanted tiktoken but had to use HF for a reason worth a notice


def encoder_for(tokenizer_json: str, fingerprint: str, hf=None, split_special: bool = False) -> TiktokenEncoder:
    """The encoder of a tokenizer ``choose`` accepted: the one it checked, in
    this process (or a forked child); else converted again, unchecked."""
    enc = _ENCODERS.get(fingerprint)
    if enc is None or enc.split_special != split_special:
        enc = TiktokenEncoder(tokenizer_json, None, hf, split_special)
        _ENCODERS.clear()
        _ENCODERS[fingerprint] = enc
    return enc


def choose(tokenizer_json: str, fingerprint: str, requested: str, sample, hf=None, split_special: bool = False) -> Choice:
    """Pick the engine for a build: ``requested`` is "auto", "hf" or "tiktoken";
    ``sample()`` returns input texts to compare on (called only if needed).

    "tiktoken" that cannot be exact raises ``PackerError``; "auto" falls back to HF.
    """
    from ..errors import PackerError

    if requested not in BACKENDS:
        raise PackerError(f"unknown tokenizer backend {requested!r}: choose from {', '.join(BACKENDS)}")
    if requested == "hf":
        return Choice("hf", "asked for (--tokenizer-backend hf)")

    def refuse(why: str, notice: bool) -> Choice:
        if requested == "tiktoken":  # the build stops: say so, and what to pass instead
            raise PackerError(f"--tokenizer-backend tiktoken: {why}; nothing was built (drop the option, or pass "
                              "--tokenizer-backend hf, to encode with HF tokenizers)")
        return Choice("hf", why + ", so HF tokenizers encodes", notice)

    try:
        import tiktoken  # noqa: F401
    except ImportError:
        return refuse("tiktoken is not installed (pip install tiktoken)", True)
    if hf is None:
        from tokenizers import Tokenizer

        hf = Tokenizer.from_str(tokenizer_json)
    hf.encode_special_tokens = split_special  # the reference encodes as the build will
    static = _STATIC.get((fingerprint, split_special))
    if static is None:

        passed = check_cache.load(fingerprint, split_special, hard_strings())
        try:
            if passed is not None:  # this tokenizer passed on this machine before: only the input check runs
                conv = replace(convert(tokenizer_json, check_merges=False), note=passed["note"])
                static = (TiktokenEncoder(tokenizer_json, conv, hf, split_special),
                          CheckResult(True, passed["texts"], passed["tokens"], ""))
            else:
                enc = TiktokenEncoder(tokenizer_json, convert(tokenizer_json, hf=hf), hf, split_special)
                strings = hard_strings(enc.conv.added) + suspect_strings(enc.conv.suspects)
                static = (enc, check(enc, hf, strings, "hard string"))
                if static[1].ok:
                    check_cache.store(fingerprint, split_special, hard_strings(), enc.conv.note, static[1].texts, static[1].tokens)
        except NotExpressible as e:
            static = f"tiktoken cannot express this tokenizer exactly ({e})"
        _STATIC.clear()
        _STATIC[(fingerprint, split_special)] = static
    if isinstance(static, str):
        return refuse(static, False)
    enc, hard = static
    if not hard.ok:
        return refuse(f"tiktoken gave other ids than HF on {hard.difference}", True)
    r = check(enc, hf, sample(), "input text")
    if not r.ok:
        return refuse(f"tiktoken gave other ids than HF on {r.difference}", True)
    _ENCODERS.clear()
    _ENCODERS[fingerprint] = enc
    return Choice("tiktoken", f"byte-level BPE that tiktoken runs exactly ({enc.conv.note}); same ids as HF on "
                              f"{hard.texts} hard {'string' if hard.texts == 1 else 'strings'} and {r.texts} input "
                              f"{'text' if r.texts == 1 else 'texts'} ({hard.tokens + r.tokens:,} tokens)")
