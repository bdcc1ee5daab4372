"""NFC / NFKC before the fast backend, with the ``tokenizers`` library's own normalizer.

The HF tokenizer normalizes with the Unicode tables compiled into ``tokenizers``;
Python's ``unicodedata`` has other tables (another Unicode version), and the two
disagree on some combining marks and compositions (U+11935 U+11930 composes in
Python 3.11, not in tokenizers 0.23). So the fast backend never uses
``unicodedata``: ``Normalizer`` calls ``tokenizers.normalizers.NFC()`` (or
``NFKC()``), the very code HF runs, and agreement holds by construction.

That call costs about 100 ns a character (it keeps offsets), as much as encoding
itself, so it is skipped where it provably changes nothing: a text whose
characters are all *boundaries* of the form (Unicode's NFx_QC=Yes and ccc=0:
unchanged alone, a starter, never the second half of a composition) is already
normal, since normalization acts on the stretches between boundaries. Which
characters are boundaries is read off ``tokenizers`` itself, not off Python's
tables: every code point is normalized once in a context that shows a
non-starter (it is reordered against U+0345 and U+0334), and the last
characters of every canonical decomposition (NFD) are the possible second
halves. The table (one bit per code point) is worked out once per ``tokenizers``
version and form (~1.5 s) and kept in packer's record folder (check_cache.py).
"""

from __future__ import annotations

import numpy as np

from . import check_cache

_SEP = "\x00"  # a starter that composes with nothing: the probes of one batch cannot touch each other
_BLOCK = 4096  # code points per normalize call while the table is worked out
_TABLES: dict = {}  # (form, tokenizers version) -> bool array: True = not a boundary (normalize the text)


def _not_boundaries(form: str) -> np.ndarray:
    """Per code point, True where the ``tokenizers`` normalizer ``form`` may change a text holding it."""
    from tokenizers import normalizers

    norm, nfd = getattr(normalizers, form)().normalize_str, normalizers.NFD().normalize_str
    table = np.zeros(0x110000, dtype=bool)
    table[0xD800:0xE000] = True  # lone surrogates: never fast (HF refuses them)
    if norm(_SEP + "\u0345\u0334") != _SEP + "\u0334\u0345":  # the probe's marks no longer 240 and 1
        table[0x80:] = True
        return table
    for lo in range(0x80, 0x110000, _BLOCK):  # a block that comes out as it went in has nothing to mark
        cps = [c for c in range(lo, min(lo + _BLOCK, 0x110000)) if not 0xD800 <= c <= 0xDFFF]
        probes = ["\u0345" + chr(c) + "\u0334" for c in cps]  # a non-starter is reordered; a change alone shows
        text = _SEP.join(probes)
        got = norm(text)
        if got != text:
            table[[c for c, p, g in zip(cps, probes, got.split(_SEP)) if g != p]] = True
        text = _SEP.join(map(chr, cps))
        got = nfd(text)
        if got != text:  # the second halves of compositions: the characters after the first of each NFD
            table[[ord(x) for d in got.split(_SEP) for x in d[1:]]] = True
    return table


def table(form: str) -> np.ndarray:
    """``_not_boundaries(form)``, from this process, from the record folder, or worked out (and recorded)."""
    import tokenizers

    key = (form, tokenizers.__version__)
    got = _TABLES.get(key)
    if got is not None:
        return got
    where, name = check_cache.folder("normalizers"), f"{form}-tokenizers-{tokenizers.__version__}.bits"
    raw = check_cache.read_bytes(where, name)
    if raw is not None and len(raw) == 0x110000 // 8:
        got = np.unpackbits(np.frombuffer(raw, dtype=np.uint8)).astype(bool)
    else:
        got = _not_boundaries(form)
        check_cache.write_bytes(where, name, np.packbits(got).tobytes())
    _TABLES[key] = got
    return got


class Normalizer:
    """``Normalizer("NFC")(text)``: what HF's NFC normalizer makes of ``text``, exactly."""

    def __init__(self, form: str):
        from tokenizers import normalizers

        self.form = form
        self._norm = getattr(normalizers, form)().normalize_str
        self._changes = table(form).view(np.uint8)

    def __call__(self, text: str) -> str:
        if text.isascii():
            return text
        try:
            cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        except UnicodeEncodeError:  # lone surrogates: left as they are, for the encoder to refuse (HF does)
            return text
        return self._norm(text) if np.take(self._changes, cps).any() else text  # ~8 ns a character
