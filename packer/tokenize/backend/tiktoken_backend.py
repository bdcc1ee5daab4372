"""tiktoken as the backend for byte-level BPE tokenizer.json files, where it gives HF's ids exactly.

tiktoken runs the same algorithm as HF ``tokenizers`` for byte-level BPE (a
regex cuts the text into pieces, each piece's UTF-8 bytes are merged pairwise,
lowest rank first) about 4x faster. ``convert`` decides whether a
tokenizer.json can be expressed in it *exactly* and builds the pieces of a
``tiktoken.Encoding`` in memory (nothing downloaded, nothing written);
``TiktokenEncoder`` encodes with it; ``check`` compares it with HF on a fixed
set of hard strings plus a sample of the input, and the build falls back to
HF on any difference.

Why the conversion is exact (the conditions ``convert`` checks):

- **Pieces.** No normalizer, or NFC / NFKC alone, applied first with the
  ``tokenizers`` library's own normalizer (normalize.py: HF's tables, not
  Python's ``unicodedata``); the pre-tokenizer is ``ByteLevel(use_regex=True)``
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

The token ids never depend on which backend ran, so neither do the shards.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, replace

import numpy as np

from ..memo import remember, store
from . import check_cache, gigatoken_backend
from .tiktoken_check import _NEVER, CheckResult, _AddedScan, check, hard_strings, hf_encode, normal_forms, suspect_strings
from .tiktoken_convert import Conversion, NotExpressible, convert


# --------------------------------------------------------------------------
# Encoding.


class TiktokenEncoder:
    """Encodes texts to HF's ids with tiktoken; the rare text tiktoken must not
    see (an added token's literal string inside, or not encodable as UTF-8)
    goes to HF. Single-threaded: the build runs one per core."""

    def __init__(self, tokenizer_json: str, conv: Conversion | None = None, hf=None, split_special: bool = False,
                 lazy: bool = False):
        self.split_special = split_special  # HF's encode_special_tokens, for the texts HF encodes
        self.conv = conv if conv is not None else convert(tokenizer_json, check_merges=False)
        self._json = tokenizer_json
        # The HF tokenizer for the texts tiktoken must not see: ``hf`` only if it encodes as this build
        # does (it is never changed here: it may be shared), else one of our own, loaded on first need.
        self._hf = hf if hf is not None and hf.encode_special_tokens == split_special else None
        self._allowed: frozenset = frozenset()
        self.to_hf = 0  # texts handed to HF so far
        added = self.conv.added
        self._needs_hf = _AddedScan(added) if added else (lambda text: False)
        # ``lazy``: tiktoken's encoder (its CoreBPE: 3% of a 1-worker build) is built on the first
        # encode, never where another encoder (fastokens) encodes over this one; only where the
        # conversion passed before (its pattern taken): a pattern fancy-regex rejects raises here.
        self._fns = None
        if not lazy:
            self.ready()

    def ready(self) -> tuple:
        """(encode_ordinary, encode into a uint32 buffer), tiktoken's encoder built on first call."""
        if self._fns is not None:
            return self._fns
        import tiktoken

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
        encode = enc._core_bpe.encode_ordinary
        buffer = getattr(enc._core_bpe, "encode_to_tiktoken_buffer", None)  # tiktoken >= 0.8
        if buffer is None:
            buffer = lambda text, allowed: array("I", encode(text))  # noqa: E731
        if self.conv.normalize is not None:  # HF's NFC/NFKC normalizer, applied first (normalize.py)
            from .normalize import Normalizer

            raw_encode, raw_buffer, norm = encode, buffer, Normalizer(self.conv.normalize)
            encode = lambda t: raw_encode(norm(t))  # noqa: E731
            buffer = lambda t, allowed: raw_buffer(norm(t), allowed)  # noqa: E731
        self._fns = (encode, buffer)
        return self._fns

    @property
    def _encode(self):
        return self.ready()[0]

    @property
    def _buffer(self):
        return self.ready()[1]

    def _hf_encode(self, texts: list[str]) -> list[list[int]]:
        return hf_encode(self, texts)

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

SAMPLE_DOCS = 200  # input texts compared before a build uses tiktoken
SAMPLE_CHARS = 1 << 18  # ... at most this much text in all
SAMPLE_TEXT_CHARS = 1 << 12  # ... and at most this much of any one text (a prefix is as good a test)

# Keyed on all that decides their value (memo.remember), one entry each: a function that reads them
# returns what it would compute from its arguments.
_ENCODERS: dict = {}  # (fingerprint, split_special) -> TiktokenEncoder: the build's Encoder reuses the checked one
_STATIC: dict = {}  # (fingerprint, split_special) -> (TiktokenEncoder, hard-string CheckResult) or why it failed


@dataclass(frozen=True)
class Choice:
    backend: str  # "hf" | "tiktoken"
    reason: str  # one line: why
    fallback: bool = False  # auto wanted tiktoken but had to use HF for a reason worth a notice
    later: "InputCheck | None" = None  # choose(defer_input=True): the check on input texts still to run


@dataclass(frozen=True)
class InputCheck:
    """The last step of ``choose``, left to the caller: tiktoken against HF on input texts.
    A build runs it on one worker while the others start (``run``), then ``outcome``."""

    requested: str  # "auto" | "tiktoken"
    note: str  # the conversion's note, for the reason
    hard_texts: int  # hard strings passed
    hard_tokens: int
    backend: str = "tiktoken"  # or "fastokens": the encoder checked (fastokens_backend.py)
    alone: bool = False  # fastokens or gigatoken alone, where tiktoken cannot express the tokenizer (fastokens_alone.py)

    def outcome(self, r: CheckResult) -> Choice:
        """The Choice once the input check gave ``r``; "tiktoken" refused raises PackerError."""
        if not r.ok:
            return _refuse(self.requested, f"{self.backend} gave other ids than HF on {r.difference}", True)
        by = {"fastokens": ", encoded by fastokens (faster, same ids)", "gigatoken": ", encoded by gigatoken (same ids)"
              }.get(self.backend, "")
        what = f"byte-level BPE that tiktoken runs exactly ({self.note}){by}"
        if self.alone:
            what = f"{self.backend} runs it exactly ({self.note}; tiktoken cannot express it)"
        return Choice(self.backend, f"{what}; same ids as HF on "
                                  f"{self.hard_texts} hard {'string' if self.hard_texts == 1 else 'strings'} and "
                                  f"{r.texts} input {'text' if r.texts == 1 else 'texts'} "
                                  f"({self.hard_tokens + r.tokens:,} tokens)")


def run_input_check(enc: "TiktokenEncoder", hf, texts: list[str]) -> CheckResult:
    """The input check itself: ``enc`` against the HF tokenizer ``hf`` on ``texts``."""
    return check(enc, hf, texts, "input text")


def _refuse(requested: str, why: str, notice: bool) -> Choice:
    from ...errors import PackerError
    from ..backends import FORCED

    if requested in FORCED:  # the build stops: say so, and what to pass instead
        raise PackerError(f"--tokenizer-backend {requested}: {why}; nothing was built (drop the option, or pass "
                          "--tokenizer-backend hf, to encode with HF tokenizers)")
    return Choice("hf", why + ", so HF tokenizers encodes", notice)


def encoder_for(tokenizer_json: str, fingerprint: str, hf=None, split_special: bool = False,
                backend: str = "tiktoken") -> TiktokenEncoder:
    """The encoder of a tokenizer ``choose`` accepted for ``backend`` ("tiktoken" | "fastokens"): the
    one it checked, in this process (or a forked child); else converted again, unchecked."""
    from . import fastokens_alone, fastokens_backend

    def new():
        try:
            return TiktokenEncoder(tokenizer_json, None, hf, split_special, lazy=backend != "tiktoken")
        except NotExpressible:  # "fastokens" chosen alone (fastokens_alone.py): no tiktoken under it
            if backend == "tiktoken":
                raise
            return fastokens_alone.encoder_for(tokenizer_json, fingerprint, split_special, hf, backend)

    enc = remember(_ENCODERS, (fingerprint, split_special), new)
    if getattr(enc, "backend", "tiktoken") == backend:
        return enc
    # the one checked, or a new one over the tiktoken encoder (same ids)
    if backend == "gigatoken":
        return gigatoken_backend.encoder_for(tokenizer_json, getattr(enc, "base", enc))
    return enc.base if backend == "tiktoken" else fastokens_backend.encoder_for(tokenizer_json, enc)


def choose(tokenizer_json: str, fingerprint: str, requested: str, sample, hf=None, split_special: bool = False,
           defer_input: bool = False, fast: bool | int = True) -> Choice:
    """Pick the backend for a build: ``requested`` is "auto", "hf" or "tiktoken";
    ``sample()`` returns input texts to compare on (called only if needed).
    ``hf``: the HF tokenizer, or a function that returns it (called only if needed:
    a check recorded as passed needs none until the input check); used only if it
    encodes as the build will (``encode_special_tokens == split_special``), never changed.
    ``requested`` is checked by the caller (``backends.check_backend``).

    "tiktoken" that cannot be exact raises ``PackerError``; "auto" falls back to HF.
    ``defer_input``: where tiktoken passed all but the input check, return it with
    ``later`` set (an ``InputCheck``) instead of running that check. ``fast``: "auto" may take
    fastokens; or the build's input bytes: fastokens where ``fastokens_backend.worth_it`` (not for an
    input small against its tokenizer, whose start it would lengthen).
    """
    if requested == "hf":
        return Choice("hf", "asked for (--tokenizer-backend hf)")
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        return _refuse(requested, "tiktoken is not installed (pip install tiktoken)", True)
    loaded = []

    def get_hf():
        if not loaded:
            h = hf() if callable(hf) else hf
            if h is None or h.encode_special_tokens != split_special:  # the reference encodes as the build will
                from tokenizers import Tokenizer

                h = Tokenizer.from_str(tokenizer_json)
                h.encode_special_tokens = split_special  # our own: no one else holds it
            loaded.append(h)
        return loaded[0]

    def pays(versus: str) -> bool:  # fast: True/False, or the build's input bytes (fastokens_backend.worth_it)
        from .fastokens_backend import worth_it

        if requested == "fastokens":  # forced: whatever the size
            return True
        return fast if isinstance(fast, bool) else worth_it(fast, len(tokenizer_json), versus)

    from . import fastokens_backend

    if requested in ("auto", "fastokens") and pays("tiktoken") and (fingerprint, split_special) not in fastokens_backend._FASTER \
            and '"Metaspace"' not in tokenizer_json and not gigatoken_backend.preferred_alone(tokenizer_json):
        # (fastokens alone loads another JSON for Metaspace; gigatoken alone may run instead)
        fastokens_backend.preload(tokenizer_json)  # in a thread, while the checks below run
    try:
        return _choose(tokenizer_json, fingerprint, requested, sample, hf, split_special, defer_input, get_hf, pays)
    finally:
        fastokens_backend.settle()  # no thread left running: the build forks its workers


def _choose(tokenizer_json: str, fingerprint: str, requested: str, sample, hf, split_special: bool,
            defer_input: bool, get_hf, pays) -> Choice:
    """``choose`` from the fastokens check on; ``get_hf`` and ``pays`` are its."""
    from . import fastokens_alone

    engines = gigatoken_backend.alone_engines(requested, tokenizer_json)
    may_alone = requested in ("fastokens", "gigatoken") or (requested == "auto" and pays("hf") and
                                                             os.environ.get("PACKER_FASTOKENS") != "off")
    # The first engine's pass on record (only where tiktoken refused the tokenizer): no HF, no conversion.
    # (Not a later engine's: an older record of fastokens would keep auto from ever checking gigatoken.)
    engine = engines[0]
    alone = fastokens_alone.on_record(tokenizer_json, fingerprint, split_special, hf if not callable(hf) else None,
                                      engine) if may_alone else None
    static = "" if alone is not None else remember(_STATIC, (fingerprint, split_special), lambda: _static_check(
        tokenizer_json, fingerprint, split_special, get_hf, hf if not callable(hf) else None))
    if isinstance(static, str) or not static[1].ok:
        for engine in engines if alone is None and may_alone else ():
            if (alone := fastokens_alone.checked(tokenizer_json, fingerprint, split_special, get_hf,
                                                 hf if not callable(hf) else None, engine)) is not None:
                break
        if alone is None and isinstance(static, str):
            return _refuse(requested, gigatoken_backend.refusal() if requested == "gigatoken" else static, False)
        if alone is None:
            return _refuse(requested, f"tiktoken gave other ids than HF on {static[1].difference}", True)
        enc, hard = alone
        store(_ENCODERS, (fingerprint, split_special), enc)
        later = InputCheck(requested, enc.conv.note, hard.texts, hard.tokens, engine, alone=True)
        return Choice(engine, "", later=later) if defer_input else later.outcome(
            run_input_check(enc, get_hf(), sample()))
    enc, hard = static
    backend = "tiktoken"
    if requested in ("auto", "fastokens") and pays("tiktoken"):  # fastokens where installed and exact on the same hard strings (fastokens_backend.py)
        from . import fastokens_backend

        fast, fast_hard = fastokens_backend.faster(enc, tokenizer_json, fingerprint, get_hf)
        if fast_hard is not None:
            enc, backend = fast, fastokens_backend.BACKEND
        elif requested == "fastokens":
            why = ("fastokens is not installed (pip install fastokens)" if fastokens_backend.version() is None else
                   "PACKER_FASTOKENS=off" if os.environ.get("PACKER_FASTOKENS") == "off" else
                   "fastokens cannot load this tokenizer, or gave other ids than HF on the hard strings")
            return _refuse(requested, why, False)
    if requested == "gigatoken":  # by name, over the checked tiktoken conversion (gigatoken_backend.py)
        got = gigatoken_backend.checked(enc, tokenizer_json, fingerprint, get_hf)
        if got is None:
            return _refuse(requested, gigatoken_backend.refusal(), False)
        enc, backend = got[0], gigatoken_backend.BACKEND
    if backend == "tiktoken":
        enc.ready()  # built here, before the workers fork: they share it
    store(_ENCODERS, (fingerprint, split_special), enc)
    later = InputCheck(requested, enc.conv.note, hard.texts, hard.tokens, backend)
    if defer_input:
        return Choice(backend, "", later=later)
    return later.outcome(run_input_check(enc, get_hf(), sample()))


def _static_check(tokenizer_json: str, fingerprint: str, split_special: bool, get_hf, hf):
    """(encoder, hard-string CheckResult), from the record of a passed check where there is one;
    or the reason tiktoken cannot express the tokenizer."""
    hard_base = hard_strings()  # what the record is keyed on (built once: ~15 ms)
    passed = check_cache.load(fingerprint, split_special, hard_base)
    try:
        if passed is not None:  # this tokenizer passed on this machine before: only the input check runs
            conv = check_cache.load_conversion(fingerprint, split_special, hard_base)
            if conv is None:
                conv = convert(tokenizer_json, check_merges=False)
                check_cache.store_conversion(fingerprint, split_special, hard_base, conv)
            conv = replace(conv, note=passed["note"])
            # The HF tokenizer only if already loaded: the encoder loads it on first need.
            return (TiktokenEncoder(tokenizer_json, conv, hf, split_special, lazy=True),
                    CheckResult(True, passed["texts"], passed["tokens"], ""))
        ref = get_hf()
        enc = TiktokenEncoder(tokenizer_json, convert(tokenizer_json, hf=ref), ref, split_special)
        strings = hard_strings(enc.conv.added) + suspect_strings(enc.conv.suspects) + normal_forms(enc.conv)
        result = (enc, check(enc, ref, strings, "hard string"))
        if result[1].ok:
            check_cache.store(fingerprint, split_special, hard_base, enc.conv.note, result[1].texts, result[1].tokens)
            check_cache.store_conversion(fingerprint, split_special, hard_base, enc.conv)
        return result
    except NotExpressible as e:
        return f"tiktoken cannot express this tokenizer exactly ({e})"
