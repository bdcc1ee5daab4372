"""fastokens alone: the fast exact encoder for tokenizers tiktoken cannot express.

tiktoken runs byte-level BPE only (tiktoken_convert.py). fastokens reads the tokenizer.json
itself and runs HF's own BPE path, so it also takes DeepSeek V3 (a Sequence of Split
pre-tokenizers, then ByteLevel) and SentencePiece-style BPE with byte_fallback (Gemma 3's
Replace normalizer and Split, Llama 2's file: normalizer Prepend + Replace). Where tiktoken
refuses a tokenizer, ``auto`` takes fastokens alone by the same rule as over tiktoken: the
same ids as HF on the hard strings (tiktoken_check.py, with the tokenizer's added tokens)
and then on the build's own input sample (input_check.py), else HF. A pass on the hard
strings is recorded (check_cache.py), so the next build reads it back.

**Metaspace**, which fastokens refuses (Mistral v3; Llama 2 as transformers 5 rebuilds it),
is given to fastokens as the same string transform (``without_metaspace``). In tokenizers
(``pre_tokenizers/metaspace.rs``) Metaspace on one piece of text replaces ``" "`` by the
replacement, then prepends the replacement unless the result already starts with it
(``always``; ``first``: only on the piece at offset 0 of the text; ``never``: no prepend),
then with ``split`` cuts before each replacement (``MergedWithNext``). packer sends a text
holding an added token's string to HF, so fastokens sees whole texts only: one piece at
offset 0, where ``first`` is ``always``. The equivalent: a ``Replace(" ", replacement)``
normalizer; the replacement put before a non-empty text that starts with neither ``" "``
nor the replacement (here, in Python: ``FastokensEncoder``'s ``prep``); with ``split``, a
``Split(replacement, MergedWithNext)`` in Metaspace's place. It holds only where no other
normalizer runs first (its output decides the prepend): the normalizer must be none or that
same Replace, and Metaspace the first pre-tokenizer; otherwise HF encodes. The check then
proves it on ids, with strings aimed at it (``METASPACE_STRINGS``).

**ignore_merges** (Mistral v3) makes fastokens 0.3.5 five times slower where a piece is a whole text
(Metaspace without split: 0.22 CPU-s/MB against 0.04). The flag only changes a piece that is itself a
vocabulary entry: that entry's id instead of what the merges give. Where the merges give the entry
itself the two agree, so the flag matters only for the entries the merges cannot reach
(``unreachable``: Mistral v3's 256 byte tokens ``<0x..>``, its 751 added tokens, 20
``[REFERENCE_DOC_n]``). Where every pre-tokenizer is a Split, each piece is a substring of the
normalized text, so a text that holds none of those entries encodes alike with the flag off; a text that
holds one goes to HF (``unreachable_scan``). The check proves it as above.
"""

from __future__ import annotations

import json
import re

from . import check_cache
from .fastokens_backend import FastokensEncoder, version
from .tiktoken_check import CheckResult, _AddedScan, check, hard_strings, hf_encode

# Around the Metaspace transform (leading spaces and replacements, empty text, runs of both), and the byte
# tokens' names as text: fastokens takes a literal "<0x41>" for the byte token where the vocabulary lacks its
# characters, HF does not (found by the input check on a small SentencePiece-style vocabulary).
METASPACE_STRINGS = ["", "\u2581", "\u2581a", " \u2581a", "\u2581 a", "a\u2581b", "\u2581\u2581", "  ", " ", "\u2581\u2581x y",
                     "\ta b", "\n x", "x \u2581 y", "\u3000a", "\u00a0a", "<0x41>", "a <0x0A> b<0xFF><0xE2><0x96><0x81>"]
_ALONE: dict = {}  # (fingerprint, split_special, engine) -> (encoder, CheckResult), or None where it did not pass
_RECORD = {"fastokens": "fastokens-alone-3", "gigatoken": "gigatoken-alone-1"}  # engine -> its records' tag
_IGNORE_MERGES = re.compile(r'"ignore_merges"\s*:\s*true')


class Plain:
    """What a FastokensEncoder reads of a tiktoken ``Conversion``: the note, the added tokens."""

    def __init__(self, note: str, added: tuple[str, ...]):
        self.note, self.added, self.suspects = note, added, ()


class HFSide:
    """The part of a ``TiktokenEncoder`` a FastokensEncoder borrows: the added-token scan, and HF for
    the texts fastokens must not see (an added token's string inside; lone surrogates)."""

    def __init__(self, tokenizer_json: str, added: tuple[str, ...], split_special: bool, note: str, hf=None,
                 scan: bool = True, also=()):
        self.split_special, self._json, self.to_hf = split_special, tokenizer_json, 0
        self._hf = hf if hf is not None and hf.encode_special_tokens == split_special else None
        self.conv = Plain(note, tuple(added))
        # ``scan`` False: fastokens cuts the added tokens out itself (checked on every one of them): Gemma 3's
        # added "\n", "\n\n", "▁▁", ... are in nearly every text, which would all go to HF.
        # ``also``: more strings a text fastokens sees must not hold, or a function saying so (``unreachable_scan``).
        strings = (self.conv.added if scan else ()) + (tuple(also) if not callable(also) else ())
        self._needs_hf = _AddedScan(strings) if strings else (lambda text: False)
        if callable(also):
            first = self._needs_hf
            self._needs_hf = lambda text: first(text) or also(text)

    def _hf_encode(self, texts: list[str]) -> list[list[int]]:
        return hf_encode(self, texts)  # its own HF tokenizer, loaded on first need


def _pre_steps(d: dict) -> list[dict]:
    """The pre-tokenizers of tokenizer dict ``d``, in order (a Sequence's, or the one)."""
    pre = d.get("pre_tokenizer")
    return (pre.get("pretokenizers") or []) if pre and pre.get("type") == "Sequence" else ([pre] if pre else [])


def without_metaspace(d: dict) -> tuple[dict, str | None] | None:
    """(tokenizer dict fastokens loads, the replacement to prepend or None) for tokenizer dict ``d``
    (the module docstring's equivalence); ``d`` itself where it has no Metaspace; None where the
    equivalence does not hold."""
    seq = _pre_steps(d)
    where = [i for i, p in enumerate(seq) if p.get("type") == "Metaspace"]
    if not where:
        return d, None
    ms = seq[0]
    if where != [0] or ms.get("prepend_scheme") not in ("first", "always", "never") or len(ms.get("replacement", "")) != 1:
        return None
    rep = ms["replacement"]
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": rep}
    norm = d.get("normalizer")
    if norm is not None and norm != replace and norm != {"type": "Sequence", "normalizers": [replace]}:
        return None  # another normalizer first: its output decides the prepend
    rest = ([{"type": "Split", "pattern": {"String": rep}, "behavior": "MergedWithNext", "invert": False}]
            if ms.get("split") else []) + seq[1:]
    out = dict(d, normalizer=replace, pre_tokenizer=None if not rest else rest[0] if len(rest) == 1 else
               {"type": "Sequence", "pretokenizers": rest})
    return out, None if ms["prepend_scheme"] == "never" else rep


def unreachable(d: dict) -> list[str] | None:
    """The vocabulary entries of BPE tokenizer dict ``d`` (``ignore_merges`` on) that its merges do not
    give as themselves (the module docstring), or None where turning the flag off cannot be proven by a
    scan: a pre-tokenizer other than Split (a piece is then no substring of the text), a normalizer
    other than one Replace of a string."""
    from tokenizers import Tokenizer

    model, norm = d.get("model") or {}, d.get("normalizer")
    if model.get("type") != "BPE" or any(p.get("type") != "Split" for p in _pre_steps(d)):
        return None
    if norm is not None and not (norm.get("type") == "Replace" and "String" in (norm.get("pattern") or {})):
        return None
    bare = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": dict(model, ignore_merges=False)}
    vocab = model.get("vocab") or {}
    words = list(vocab)
    got = Tokenizer.from_str(json.dumps(bare)).encode_batch(words, add_special_tokens=False)
    return [w for w, e in zip(words, got) if e.ids != [vocab[w]]]


def unreachable_scan(entries: list[str], norm: dict | None, prep):
    """What tells whether a piece of a text, normalized by ``norm`` (a Replace of a string, or None) after
    ``prep``, could be one of ``entries``: ``entries`` themselves where none holds what the Replace writes
    (the raw text tells: HFSide scans it with the added tokens, in one pass), else ``scan(text)``."""
    old, new = ((norm.get("pattern") or {}).get("String"), norm.get("content")) if norm else (None, None)
    if not old or not any(new in e for e in entries):
        return tuple(entries)
    find = _AddedScan(tuple(entries))
    return lambda text: find((prep(text) if prep else text).replace(old, new))


def _version(engine: str) -> str | None:
    """The installed ``engine``'s version ("fastokens" | "gigatoken"), or None where it is not installed."""
    if engine == "gigatoken":
        from .gigatoken_backend import version as giga_version

        return giga_version()
    return version()


def _added(d: dict) -> list[str]:
    """The added tokens' strings of tokenizer dict ``d``."""
    return [a["content"] for a in d.get("added_tokens") or [] if a.get("content")]


def _note(d: dict) -> str:
    """What a tokenizer dict ``d`` is, for the backend's reason: its model and pre-tokenizers."""
    model, pre = d.get("model") or {}, d.get("pre_tokenizer") or {}
    parts = [pre.get("type")] + [p.get("type") for p in pre.get("pretokenizers") or []]
    return (f"{model.get('type')}{' with byte_fallback' if model.get('byte_fallback') else ''}, pre-tokenizer "
            f"{'/'.join(str(p) for p in parts if p) or 'none'}")


def _gigatoken_encoder(tokenizer_json: str, split_special: bool, hf, added, note, own: bool):
    """``_encoder`` for gigatoken: the tokenizer.json as it is (gigatoken reads Metaspace and ignore_merges
    itself; the check proves its ids), or None where gigatoken cannot load it."""
    from .gigatoken_backend import GigatokenEncoder

    if own and split_special:
        return None  # gigatoken has no --split-special-tokens (before parsing: 1.9 s for Gemma 3's file)
    if added is None or note is None:
        d = json.loads(tokenizer_json)
        added = _added(d) if added is None else added
        note = _note(d) if note is None else note
    side = HFSide(tokenizer_json, tuple(added), split_special, note, hf, scan=not own)
    side.entries = None
    try:
        return GigatokenEncoder(tokenizer_json, side)
    except Exception:  # gigatoken_backend.load: a part it lacks, or its panic
        return None


def _encoder(tokenizer_json: str, split_special: bool, hf, added=None, note: str | None = None, own: bool = False,
             entries: list[str] | None = None, engine: str = "fastokens"):
    """A FastokensEncoder for ``tokenizer_json`` alone (no tiktoken under it), or None where the
    tokenizer has a Metaspace form fastokens cannot be given, or fastokens refuses it. With ``added``
    and ``note`` (from the record) a tokenizer without Metaspace is not parsed here. ``own``: fastokens cuts
    the added tokens out itself (None where it may not: Metaspace's prefix holds for whole texts only, and
    fastokens has no --split-special-tokens). ``entries``: ``unreachable``'s answer, from the record.
    ``engine`` "gigatoken": a ``GigatokenEncoder`` instead (``_gigatoken_encoder``)."""
    if engine == "gigatoken":
        return _gigatoken_encoder(tokenizer_json, split_special, hf, added, note, own)
    d = fast_d = rep = None
    ignore_merges = _IGNORE_MERGES.search(tokenizer_json) is not None
    if added is None or note is None or '"Metaspace"' in tokenizer_json or (ignore_merges and entries is None):
        d = json.loads(tokenizer_json)
        got = without_metaspace(d)
        if got is None:
            return None
        fast_d, rep = got
    if added is None:
        added = _added(d)
    fresh_note = note is None
    if note is None:
        note = _note(d)
        note += ", its Metaspace given to fastokens as a Replace and a prefix" if fast_d is not d else ""
    if own and (rep is not None or split_special):
        return None
    prep = None
    if rep is not None:
        prep = lambda t: rep + t if t and t[0] != " " and t[0] != rep else t  # noqa: E731
    also, fast_json = (), None if fast_d is d else fast_d
    if ignore_merges:
        if entries is None:
            entries = unreachable(fast_d)
        if entries is not None:
            # A text holding an added token's string goes to HF (scan) or has it cut out (own): never a piece.
            entries = sorted(set(entries) - set(added))
            base = fast_d if fast_d is not None else json.loads(tokenizer_json)  # (not parsed yet: from the record)
            also = unreachable_scan(entries, base.get("normalizer"), prep)
            note += ", ignore_merges off (a text holding a vocabulary entry its merges do not give goes to HF)" \
                if fresh_note else ""
            fast_json = dict(base, model=dict(base["model"], ignore_merges=False))
    side = HFSide(tokenizer_json, tuple(added), split_special, note, hf, scan=not own, also=also)
    side.entries = entries if ignore_merges else None  # what the record keeps
    try:
        return FastokensEncoder(json.dumps(fast_json) if fast_json is not None else tokenizer_json, side, prep)
    except Exception:  # a component fastokens lacks
        return None


def checked(tokenizer_json: str, fingerprint: str, split_special: bool, get_hf, loaded=None, engine: str = "fastokens"):
    """(encoder, its hard-string CheckResult) where ``engine`` ("fastokens" | "gigatoken") loads the
    tokenizer and gives HF's ids on the hard strings (recorded, then read back: ``get_hf`` is called only
    where no pass is on record); else None. ``loaded``: the HF tokenizer if already parsed (for texts HF encodes)."""
    key = (fingerprint, split_special, engine)
    if key not in _ALONE:
        _ALONE.clear()
        _ALONE[key] = _checked(tokenizer_json, fingerprint, split_special, get_hf, loaded, engine)
    return _ALONE[key]


def _record_name(fingerprint: str, split_special: bool, ver: str, engine: str) -> str:
    strings = hard_strings() + METASPACE_STRINGS  # what the record is keyed on (the fingerprint covers added tokens)
    return check_cache._key(f"{fingerprint}\0{_RECORD[engine]} {ver}", split_special, strings) + ".alone.json"


def on_record(tokenizer_json: str, fingerprint: str, split_special: bool, loaded=None, engine: str = "fastokens"):
    """``checked``'s answer where a pass is on record (only then: tiktoken refused this tokenizer
    when it was checked), else None; parses no HF tokenizer."""
    key = (fingerprint, split_special, engine)
    if _ALONE.get(key) is not None:
        return _ALONE[key]
    ver = _version(engine)
    rec = check_cache.read_json(check_cache.folder("backend-checks"), _record_name(fingerprint, split_special, ver,
                                engine)) if ver is not None else None
    if not isinstance(rec, dict) or not {"note", "texts", "tokens", "added"} <= set(rec):
        return None
    enc = _encoder(tokenizer_json, split_special, loaded, rec["added"], rec["note"], rec.get("own") is True,
                   rec.get("entries"), engine)
    if enc is None:
        return None
    _ALONE.clear()
    _ALONE[key] = (enc, CheckResult(True, rec["texts"], rec["tokens"], ""))
    return _ALONE[key]


def added_strings(added) -> list[str]:
    """Every added token's string alone and in context: where fastokens cuts them out itself."""
    return [t for a in added for t in (a, f"x{a}y {a}{a} {a}", f"\n{a[:-1]}{a}\t")]


def _checked(tokenizer_json: str, fingerprint: str, split_special: bool, get_hf, loaded, engine: str):
    got = on_record(tokenizer_json, fingerprint, split_special, loaded, engine)
    if got is not None or _version(engine) is None:
        return got
    for own in (True, False):  # the engine on added tokens too where it gives HF's ids on every one; else HF on those texts
        enc = _encoder(tokenizer_json, split_special, loaded, own=own, engine=engine)
        if enc is None:
            continue
        strings = hard_strings(enc.conv.added) + METASPACE_STRINGS + (added_strings(enc.conv.added) if own else [])
        r = check(enc, get_hf(), strings, "hard string")
        if r.ok:
            check_cache.write_json(check_cache.folder("backend-checks"), _record_name(fingerprint, split_special,
                                   _version(engine), engine), {"note": enc.conv.note, "texts": r.texts, "tokens": r.tokens,
                                                "added": list(enc.conv.added), "own": own,
                                                "entries": enc.base.entries})
            return enc, r
    return None


def encoder_for(tokenizer_json: str, fingerprint: str, split_special: bool, hf=None, engine: str = "fastokens"):
    """The checked encoder of this process (or a forked parent's), else a new one, unchecked (the parent
    checked it); where ``engine`` is missing or refuses here, an encoder that sends every text to HF."""
    got = _ALONE.get((fingerprint, split_special, engine)) or on_record(tokenizer_json, fingerprint, split_special, hf,
                                                                          engine)
    if got is not None:
        return got[0]
    enc = _encoder(tokenizer_json, split_special, hf, engine=engine) if _version(engine) else None
    if enc is None:
        added = _added(json.loads(tokenizer_json))
        enc = FastokensEncoder(None, HFSide(tokenizer_json, tuple(added), split_special, "", hf))
    return enc
