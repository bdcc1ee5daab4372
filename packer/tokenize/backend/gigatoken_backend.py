"""gigatoken as the encoder, by name (``--tokenizer-backend gigatoken``), where it gives HF's ids exactly.

gigatoken (PyPI, ``packer[gigatoken]``; Rust, reads the tokenizer.json itself, byte-level BPE and
SentencePiece BPE) runs here on strings, as fastokens does: over a tokenizer that tiktoken already
runs exactly (the conversion's conditions and the hard strings, tiktoken_backend.py), once gigatoken
too gives HF's ids on those same hard strings (``checked``, recorded like fastokens' pass), then on
the build's input texts (the input check). Its ``TiktokenEncoder`` base lends it the added-token scan
and the HF fallback: a text holding an added token's literal string, or a batch gigatoken cannot take,
goes to HF, so the ids never depend on which encoder ran. One thread per encoder (``parallel=False``):
the build runs one encoder per core. Over a tiktoken conversion ``auto`` does not choose it: on this
project's measurements it is not faster than fastokens on strings there (docs/benchmarks.md, "Every exact
encoder per family").

Where tiktoken cannot express the tokenizer (SentencePiece BPE with byte_fallback: Llama 2, Gemma 3),
gigatoken runs alone, as fastokens does (fastokens_alone.py, ``engine="gigatoken"``): over an
``HFSide`` for the added-token scan and the HF fallback, the tokenizer.json as it is (gigatoken reads
Metaspace, Prepend and Replace itself), proven on the same hard strings plus Metaspace's.
"""

from __future__ import annotations

import os
import re

import numpy as np

from .fastokens_backend import FastokensEncoder, checked_over

BACKEND = "gigatoken"
# auto runs gigatoken alone, not fastokens alone, for SentencePiece-style BPE (byte_fallback: tiktoken cannot
# express it) whose tokenizer.json is at least this big. Measured (docs/benchmarks.md, "gigatoken alone for
# Gemma 3"): Gemma 3 (33 MB) loads in 1.2 s against fastokens' 5-7 s, and its builds cost 0.52x (50 MB) and
# 0.80x (200 MB) fastokens' CPU-seconds; Llama 2's (1.8 MB) cost 1.4-1.7x fastokens'.
ALONE_FROM_JSON_CHARS = 8 << 20
_BYTE_FALLBACK = re.compile(r'"byte_fallback"\s*:\s*true')
_CHECKED: dict = {}  # (fingerprint, split_special) -> (GigatokenEncoder, CheckResult), or None where it did not pass


def version() -> str | None:
    """The installed gigatoken's version, or None where it is not installed."""
    try:
        import gigatoken  # noqa: F401
        from importlib.metadata import version as v

        return v("gigatoken")
    except Exception:  # not installed, or a broken install
        return None


class GigatokenEncoder(FastokensEncoder):
    """``FastokensEncoder``'s interface and fallbacks, gigatoken encoding."""

    backend = BACKEND

    def __init__(self, tokenizer_json: str, base):
        self.base, self.conv, self.split_special = base, base.conv, base.split_special
        self._prep, self._needs_hf = None, base._needs_hf  # gigatoken reads Metaspace itself: no prefix to add
        if getattr(base.conv, "normalize", None):  # NFC/NFKC (Qwen3): HF's own normalizer first, none in gigatoken
            from .normalize import Normalizer  # (its Unicode tables are not HF's: U+10D27 U+10F46, tiktoken_check.py)

            self._prep, tokenizer_json = Normalizer(base.conv.normalize), _without_normalizer(tokenizer_json)
        tk = load(tokenizer_json)

        def flat(texts, add_special_tokens=False):  # as fastokens' encode_batch_flat: (ids, offsets) buffers
            if not texts:
                return np.zeros(0, np.uint32), np.zeros(1, np.uint64)
            lay = tk.encode_batch(list(texts), parallel=False).layout
            return np.ascontiguousarray(lay.content.data, np.uint32), np.ascontiguousarray(lay.offsets, np.uint64)

        self._flat = flat


def _without_normalizer(tokenizer_json: str) -> str:
    """``tokenizer_json`` with its normalizer removed (one that the conversion applies first, NFC or NFKC). Only that
    value is parsed and cut out (``"normalizer":`` with its quotes unescaped is a key, never inside a string): a
    parse and dump of the whole file took 0.74 s for Qwen3's, serial start; the whole round trip is the fallback."""
    import json

    at = tokenizer_json.find('"normalizer":')
    if at >= 0:
        start = json.decoder.WHITESPACE.match(tokenizer_json, at + len('"normalizer":')).end()  # (raw_decode takes none)
        try:
            value, end = json.JSONDecoder().raw_decode(tokenizer_json, start)
        except ValueError:
            value = None
        if isinstance(value, dict) and value.get("type") in ("NFC", "NFKC", "Sequence"):
            return tokenizer_json[:start] + "null" + tokenizer_json[end:]
    tok = json.loads(tokenizer_json)
    tok["normalizer"] = None
    return json.dumps(tok, ensure_ascii=False)


def load(tokenizer_json: str):
    """gigatoken's tokenizer of ``tokenizer_json``; ValueError where it cannot load it (a part it lacks, or a
    Rust panic: gigatoken 0.10.0 panics on Mistral v3's file, and a panic is a BaseException)."""
    import gigatoken

    try:
        return gigatoken.Tokenizer.from_json(tokenizer_json)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # pyo3's PanicException derives from BaseException
        raise ValueError(f"gigatoken cannot load this tokenizer: {type(e).__name__}: {e}") from e


def preferred_alone(tokenizer_json: str) -> bool:
    """Whether ``auto`` tries gigatoken alone before fastokens alone for this tokenizer (``ALONE_FROM_JSON_CHARS``):
    installed, not turned off (``PACKER_GIGATOKEN=off``), byte_fallback BPE, a big tokenizer.json."""
    return (len(tokenizer_json) >= ALONE_FROM_JSON_CHARS and os.environ.get("PACKER_GIGATOKEN") != "off"
            and _BYTE_FALLBACK.search(tokenizer_json) is not None and version() is not None)


def alone_engines(requested: str, tokenizer_json: str) -> tuple[str, ...]:
    """The engines that may run a tokenizer tiktoken cannot express, for backend ``requested``, in order."""
    if requested in ("fastokens", "gigatoken"):
        return (requested,)
    return ("gigatoken", "fastokens") if preferred_alone(tokenizer_json) else ("fastokens",)


def refusal() -> str:
    """Why ``--tokenizer-backend gigatoken`` stops a build: not installed, or not exact here."""
    return ("gigatoken is not installed (pip install gigatoken)" if version() is None else
            "gigatoken cannot load this tokenizer, or gave other ids than HF on the hard strings")


def checked(base, tokenizer_json: str, fingerprint: str, get_hf):
    """(encoder, its hard-string check) where gigatoken is installed, loads the tokenizer and gives HF's
    ids on ``base``'s hard strings (a pass is recorded); else None."""
    key = (fingerprint, base.split_special)
    if key not in _CHECKED:
        _CHECKED.clear()
        _CHECKED[key] = checked_over(GigatokenEncoder, BACKEND, version(), base, tokenizer_json, fingerprint, get_hf)
    return _CHECKED[key]


def encoder_for(tokenizer_json: str, base):
    """A ``GigatokenEncoder`` over ``base`` for a worker that did not inherit the checked one."""
    got = [v[0] for v in _CHECKED.values() if v is not None and v[0].base is base]
    return got[0] if got else GigatokenEncoder(tokenizer_json, base)
