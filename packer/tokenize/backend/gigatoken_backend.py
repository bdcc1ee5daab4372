"""gigatoken as the encoder, by name (``--tokenizer-backend gigatoken``), where it gives HF's ids exactly.

gigatoken (PyPI, ``packer[gigatoken]``; Rust, reads the tokenizer.json itself, byte-level BPE and
SentencePiece BPE) runs here on strings, as fastokens does: over a tokenizer that tiktoken already
runs exactly (the conversion's conditions and the hard strings, tiktoken_backend.py), once gigatoken
too gives HF's ids on those same hard strings (``checked``, recorded like fastokens' pass), then on
the build's input texts (the input check). Its ``TiktokenEncoder`` base lends it the added-token scan
and the HF fallback: a text holding an added token's literal string, or a batch gigatoken cannot take,
goes to HF, so the ids never depend on which encoder ran. One thread per encoder (``parallel=False``):
the build runs one encoder per core. ``auto`` does not choose it: on this project's measurements it is
not faster than fastokens on strings (docs/benchmarks.md, "Every exact encoder per family").
"""

from __future__ import annotations

import numpy as np

from .fastokens_backend import FastokensEncoder, checked_over

BACKEND = "gigatoken"
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
        self._prep, self._needs_hf = None, base._needs_hf
        import gigatoken

        tk = gigatoken.Tokenizer.from_json(tokenizer_json)  # ValueError etc.: a part it lacks

        def flat(texts, add_special_tokens=False):  # as fastokens' encode_batch_flat: (ids, offsets) buffers
            if not texts:
                return np.zeros(0, np.uint32), np.zeros(1, np.uint64)
            lay = tk.encode_batch(list(texts), parallel=False).layout
            return np.ascontiguousarray(lay.content.data, np.uint32), np.ascontiguousarray(lay.offsets, np.uint64)

        self._flat = flat


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
