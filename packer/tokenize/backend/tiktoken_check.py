"""Is the tiktoken backend exact for this tokenizer? Decided on ids: the same ids as HF on hard
strings (every byte, scripts, whitespace runs, the tokenizer's added tokens), strings built around
the tokens the merge conditions cannot vouch for, and a sample of the build's own input."""

from __future__ import annotations

import functools
import itertools
import os
import re
from dataclasses import dataclass
from typing import Iterable

_NEVER = "\x00packer: not a special token\x00"  # see TiktokenEncoder

# --------------------------------------------------------------------------
# The texts a fast encoder hands to HF (tiktoken_backend.TiktokenEncoder, fastokens_alone.HFSide).


class _AddedScan:
    """``scan(text)``: does ``text`` hold one of the ``added`` tokens' strings? One regex for
    all of them, compiled on the first text that holds their common prefix (Llama 3's 256
    ``<|...|>``: 35 ms of re.compile, which the build's serial start would otherwise pay);
    a text without that prefix holds none of them; without one, a text that holds none of their first
    characters, where they are few (Mistral v3's 1,027: ``<`` and ``[``), holds none."""

    def __init__(self, added: tuple[str, ...]):
        self.added, self.prefix, self.rx = added, os.path.commonprefix(list(added)), None
        firsts = {a[0] for a in added if a}
        self.firsts = tuple(firsts) if not self.prefix and len(firsts) <= 8 else ()

    def __call__(self, text: str) -> bool:
        if self.prefix and self.prefix not in text:
            return False
        if self.firsts and not any(c in text for c in self.firsts):
            return False
        if self.rx is None:  # sorted longest first, though any hit sends the text to HF
            self.rx = re.compile("|".join(re.escape(a) for a in sorted(self.added, key=len, reverse=True)))
        return self.rx.search(text) is not None


def hf_encode(holder, texts: list[str]) -> list[list[int]]:
    """HF's ids for ``texts``, with ``holder``'s HF tokenizer (``_hf``; parsed from ``_json`` on first need,
    ``encode_special_tokens`` = ``split_special``); counted in ``holder.to_hf``."""
    if holder._hf is None:
        from tokenizers import Tokenizer

        holder._hf = Tokenizer.from_str(holder._json)
        holder._hf.encode_special_tokens = holder.split_special  # our own: no one else holds it
    holder.to_hf += len(texts)
    return [e.ids for e in holder._hf.encode_batch(texts, add_special_tokens=False)]


# --------------------------------------------------------------------------
# The check against HF.


def _sweep(ranges: Iterable[tuple[int, int]], per: int = 64) -> list[str]:
    """Every code point of ``ranges`` in a letter context and a digit/space context, ``per`` to a string."""
    cps = [c for lo, hi in ranges for c in range(lo, hi) if not 0xD800 <= c <= 0xDFFF]
    return ["".join(f"a{chr(c)} {chr(c)}1 " for c in cps[i : i + per]) for i in range(0, len(cps), per)]


@functools.lru_cache(maxsize=1)
def normal_form_strings(per: int = 64) -> tuple[str, ...]:
    """Where two Unicode tables part in normalization: every combining mark of Python's tables after U+0334
    (class 1) and after U+0345 (class 240), so that a table that holds it for a starter, or for another class,
    orders it otherwise; and every canonical decomposition decomposed, so that a table that composes it otherwise
    shows it. gigatoken 0.10.0 reorders U+10D27 U+10F46 under NFC, HF's tables do not (a Qwen3 document).
    For tokenizers with an NFC or NFKC normalizer (``Conversion.normalize``); 50 ms, once a process."""
    import unicodedata

    every = "".join(map(chr, range(0x300, 0x30000)))  # (no mark or canonical decomposition past plane 2)
    marks = [f"a{ch}\u0334 a\u0345{ch} " for ch in itertools.compress(every, map(unicodedata.combining, every))]
    pairs = [unicodedata.normalize("NFD", ch) + " " for ch, d in zip(every, map(unicodedata.decomposition, every))
             if d and d[0] != "<"]
    both = marks + pairs
    return tuple("".join(both[i : i + per]) for i in range(0, len(both), per))


def normal_forms(conv) -> list[str]:
    """``normal_form_strings()`` where the conversion ``conv`` normalizes (NFC, NFKC) first, else none."""
    return list(normal_form_strings()) if conv.normalize else []


def suspect_strings(suspects: Iterable[str]) -> list[str]:
    """Strings built around each token outside the merge conditions (``Conversion.suspects``):
    alone, after a space, twice, inside words and before punctuation (7 per token)."""
    out = []
    for t in suspects:
        out += [t, " " + t, t + t, "a" + t, t + " a", t + ".", "\n" + t + "x"]
    return out


def hard_strings(added: Iterable[str] = ()) -> list[str]:
    """Strings where tiktoken and HF are most likely to part, if they ever do (deterministic)."""
    ws = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u180e\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
         "\u2009\u200a\u200b\u2028\u2029\u202f\u205f\u3000\ufeff"
    out = [
        # whitespace runs, alone and around words, every Unicode space
        " ", "  ", "   ", "\n", "\n\n\n", "\t\t", " \n", "\n ", " \n \n ", "a  b", "a   b  ", "a \n b", "  a", "a\r\nb\r\n",
        "x" + ws + "y", *[f"a{c}b {c}{c}c {c} d{c}" for c in ws], "\u3000\u3000日本", "end.   \n\n   ",
        # digits and numbers
        "1234567890", "3.14159", "1,000,000.00", "0x1F", "٣٤٥ ۶۷", "①②③", "Ⅻ ⅻ", "x² y³ ½ ¾", "１２３", "𝟙𝟚𝟛",
        "12345678901234567890", " 2024-01-01T00:00:00Z", "v1.2.3-rc4",
        # contractions, and their case-folding look-alikes
        "don't I'm we'll they've she'd it's", "DON'T IT'S WE'LL", "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D",
        "’s ’t ’re", "'ſ 'K 'İ 'ı 'ﬅ", "''s ''", "x's's 'sss", " 's", "'", "''''",
        # emoji, CJK and other scripts, combining marks
        "👍 👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️ 1️⃣", "😀" * 40, "你好，世界！", "日本語のテキスト。カタカナ ｶﾀｶﾅ", "한국어 텍스트",
        "مرحبا بالعالم", "שָׁלוֹם", "नमस्ते दुनिया", "สวัสดีครับ", "தமிழ்", "e\u0301 a\u0300\u0301\u0302 Z̷̢͔a̸l̶g̵o̴",
        "Ελληνικά Кириллица Ѐ", "ǅ ǈ ǋ ᾈ", "\u00ad\u200c\u200d\u2060",
        # byte-level look-alikes, control and odd code points
        "Ġthe Ċ ĠĠ Ã©", "\x00", "\x01\x02\x7f", "a\x00b", "\ue000\uf8ff", "\uffff\ufffe \U0010ffff", "\u0378\u0379",
        "\U000e0001\U000e0041", "\ufffd",
        # code and markup
        "def f(x):\n    return x**2  # sq\n\n\tpass\n", '{"a": [1, 2.5e-3, null]}', "<div class=\"a\">&amp;</div>",
        "https://example.com/a_b?c=d&e=%20", "**bold** _it_ `code` # H1\n- [ ] item", "C:\\Users\\a\\b.txt",
        # long pieces
        "a" * 3000, " " * 2000, "ab" * 1500, "9" * 1000, "Pneumonoultramicroscopicsilicovolcanoconiosis" * 40,
        "\n" * 500, "-" * 777, "=" * 129, "_" * 100 + "a", ".\n" * 200,
        # special-token look-alikes (the real ones are handed to HF, these must not be)
        "<|endoftext|", "|endoftext|>", "<|endoftext |>", "< |endoftext|>", "<|ENDOFTEXT|>", "<||>", "<|im_start|>",
        "</s> <s> [SEP] [CLS] <pad> <unk> <|eot_id|>", "<|endoftext|><|endoftext|>", "<|endo<|endoftext|>ftext|>",
        "a<|endoftext|>b", " <|endoftext|> ", f"a{_NEVER}b",
        # not encodable as UTF-8 (HF refuses these; so must the backend)
        "\ud800", "a\udc80b", "\udfff\ud800",
    ]
    for a in sorted(added)[:64]:
        out += [a, f"x{a}y", f" {a} ", a[:-1], a[1:], a + a, a.upper()]
    # Every code point of the scripts most text uses, and a stride through the rest.
    out += _sweep([(0x80, 0x800), (0x900, 0xE00), (0x1E00, 0x2C00), (0x3000, 0x3100), (0xFF00, 0xFFF0),
                   (0x1F300, 0x1FA00)])
    out += _sweep([(c, c + 1) for c in range(0x800, 0x110000, 331)])
    return out


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    texts: int  # texts compared
    tokens: int  # HF tokens compared
    difference: str  # "" when ok: else the first difference, one line


def _outcomes(fn, texts: list[str]) -> list:
    """ids per text, or the exception type's name where encoding fails. Texts
    that are valid UTF-8 go in one batch, the others one by one."""
    odd = set()
    for i, t in enumerate(texts):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            odd.add(i)
    out: list = [None] * len(texts)
    try:
        good = [i for i in range(len(texts)) if i not in odd]
        for i, r in zip(good, fn([texts[i] for i in good])):
            out[i] = r
    except Exception:
        odd = set(range(len(texts)))
    for i in odd:
        try:
            out[i] = fn([texts[i]])[0]
        except Exception as e:
            out[i] = type(e).__name__
    return out


def check(enc, hf, texts: list[str], what: str) -> CheckResult:
    """Compare ``enc`` (a ``tiktoken_backend.TiktokenEncoder``) with the HF tokenizer ``hf`` on ``texts``;
    ``what`` names them in the message.

    A text HF cannot encode must fail in ``enc`` too (any exception counts as
    the same outcome: the build stops either way).
    """
    ref = _hf_outcomes(hf, texts, what == "hard string")
    got = _outcomes(lambda ts: [a.tolist() for a in enc.encode_arrays(ts)], texts)
    tokens, name = 0, getattr(enc, "backend", "tiktoken")  # the engine, as the message names it
    for i, (r, g) in enumerate(zip(ref, got)):
        if isinstance(r, str) or isinstance(g, str):
            if isinstance(r, str) != isinstance(g, str):
                return CheckResult(False, i + 1, tokens, f"{what} {i} ({_show(texts[i])}): HF gives "
                                   f"{r if isinstance(r, str) else 'ids'}, {name} {g if isinstance(g, str) else 'ids'}")
            continue
        tokens += len(r)
        if r != g:
            j = next((k for k, (x, y) in enumerate(zip(r, g)) if x != y), min(len(r), len(g)))
            return CheckResult(False, i + 1, tokens, f"{what} {i} ({_show(texts[i])}): token {j} differs "
                               f"(HF {r[j:j + 3]}, {name} {g[j:j + 3]})")
    return CheckResult(True, len(texts), tokens, "")


_HARD: list = []  # [(hf, its encode_special_tokens, texts, HF's outcomes)]: the hard strings' last reference


def _hf_outcomes(hf, texts: list[str], keep: bool) -> list:
    """HF's outcomes on ``texts``. ``keep``: the hard strings, checked for tiktoken and then, the same
    strings with the same HF tokenizer (never changed: ``choose``), for fastokens: encoded by HF once."""
    if keep and _HARD and _HARD[0][0] is hf and _HARD[0][1] == hf.encode_special_tokens and _HARD[0][2] == texts:
        return _HARD[0][3]
    ref = _outcomes(lambda ts: [e.ids for e in hf.encode_batch_fast(ts, add_special_tokens=False)], texts)
    if keep:
        _HARD[:] = [(hf, hf.encode_special_tokens, list(texts), ref)]
    return ref


def _show(text: str, n: int = 30) -> str:
    return repr(text[:n] + ("..." if len(text) > n else ""))
