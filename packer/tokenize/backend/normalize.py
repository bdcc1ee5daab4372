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
tables: every code point of planes 0-2 (and of CJK's start in plane 3, the
tags and variation selectors of plane 14) is normalized once in a context
that shows a non-starter (it is reordered against U+0345 and U+0334), and the
last characters of every canonical decomposition (NFD, of all code points) are
the possible second halves. The code points not probed (unassigned or private
use almost all) count as not boundaries: a text holding one is normalized, as
exact and only slower. The table (one bit per code point) is worked out once
per ``tokenizers`` version and form (0.18 CPU-s: the probes are built as
arrays, and an NFD block of code points back to back that comes out unchanged
is split no further) and kept in packer's record folder (check_cache.py).
"""

from __future__ import annotations

import numpy as np

from . import check_cache

_SEP = "\x00"  # a starter that composes with nothing: the probes of one batch cannot touch each other
_BLOCK = 4096  # code points per normalize call while the table is worked out
_TABLES: dict = {}  # (form, tokenizers version) -> bool array: True = not a boundary (normalize the text)


_PROBED = ((0x80, 0x32000), (0xE0000, 0xE1000))  # planes 0-2, the start of 3 (CJK), tags and variation selectors


def _text(cps: np.ndarray) -> str:
    """The code points ``cps`` (uint32, no surrogates) as one str."""
    return cps.astype("<u4").tobytes().decode("utf-32-le")


def _joined(cols: list, n: int) -> str:
    """n probes, column j of each being ``cols[j]`` (a code point or an array of n), joined by _SEP."""
    probes = np.empty((n, len(cols) + 1), dtype=np.uint32)
    for j, col in enumerate(cols + [ord(_SEP)]):
        probes[:, j] = col
    return _text(probes.ravel()[:-1])


def _blocks(lo: int, hi: int):
    """The code points of [lo, hi), surrogates left out, ``_BLOCK`` at a time (uint32 arrays)."""
    for a in range(lo, hi, _BLOCK):
        cps = np.arange(a, min(a + _BLOCK, hi), dtype=np.uint32)
        cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
        if len(cps):
            yield cps


def _not_boundaries(form: str) -> np.ndarray:
    """Per code point, True where the ``tokenizers`` normalizer ``form`` may change a text holding it.
    Only the code points of ``_PROBED`` may come out False: a text with one of the others (planes 3-16
    but for CJK's start, tags and variation selectors: unassigned or private almost all) is normalized."""
    from tokenizers import normalizers

    norm, nfd = getattr(normalizers, form)().normalize_str, normalizers.NFD().normalize_str
    table = np.ones(0x110000, dtype=bool)
    table[:0x80] = False  # ASCII: never changed, never composed (``Normalizer`` skips it before the table)
    if norm(_SEP + "\u0345\u0334") != _SEP + "\u0334\u0345":  # the probe's marks no longer 240 and 1
        return table
    for lo, hi in _PROBED:
        for cps in _blocks(lo, hi):  # a block that comes out as it went in has nothing to mark
            table[cps] = False
            text = _joined([0x345, cps, 0x334], len(cps))  # a non-starter is reordered; a change alone shows
            got = norm(text)
            if got != text:
                for c, g in zip(cps.tolist(), got.split(_SEP)):
                    if g != "\u0345" + chr(c) + "\u0334":
                        table[c] = True
    # The second halves of compositions, over every code point: the characters after the first of each
    # NFD. A block's code points back to back come out of NFD as they went in only where none of them
    # decomposes (a character that does is in no character's full decomposition), so only the blocks
    # that change are split, one code point per stretch.
    for cps in _blocks(0x80, 0x110000):
        text = _text(cps)
        if nfd(text) == text:
            continue
        got = nfd(_joined([cps], len(cps)))
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
