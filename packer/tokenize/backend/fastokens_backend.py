"""fastokens as the encoder where it gives HF's ids exactly: 6-10x tiktoken's tokens per CPU-second.

fastokens (PyPI, Apache-2.0, Crusoe; one 3.8 MB wheel, no dependencies) is a
Rust reimplementation of HF ``tokenizers``' BPE path that reads the
tokenizer.json itself: a PCRE2-JIT pre-tokenizer, HF's merge order, a word
cache per thread. It is a default dependency wherever it ships a wheel (CPython on Linux x86_64 and aarch64, macOS
x86_64 and arm64, Windows amd64: environment markers in pyproject.toml; ``packer[fast]`` still
names it); elsewhere tiktoken or HF encodes, with the same ids.

Where it runs: over a tokenizer that tiktoken already runs exactly (the
conversion's conditions and the hard strings, tiktoken_backend.py), once
fastokens too gives HF's ids on those same hard strings (``faster``); and, where
tiktoken cannot express the tokenizer, alone (fastokens_alone.py), once it gives
HF's ids on the hard strings. The check on the build's own input texts then runs
with it, as it would with tiktoken; ``worth_it`` says for which input sizes. As with tiktoken, a text holding an added token's literal string
goes to HF, and a batch fastokens cannot take (lone surrogates, a regex
limit) is encoded by HF, which raises where HF alone would. The ids never
depend on which encoder ran, so neither do the shards.

``PACKER_FASTOKENS=off`` keeps tiktoken. Its thread pool is held to one thread (``FASTOKENS_BPE_THREADS=1``, unless
set): the build runs one encoder per core. A fork after encoding is safe
(tests/tokenize/backend/test_fastokens_backend.py).
"""

from __future__ import annotations

import os

import numpy as np

from ... import head_start
from . import check_cache
from .tiktoken_check import CheckResult, check, hard_strings, normal_forms, suspect_strings

BACKEND = "fastokens"
# Its load is serial start, about 0.16-0.26 CPU-s per MB of tokenizer.json (GPT-2 0.5 s, Llama 3 2.0 s,
# Gemma 3 5.1 s; HF's own: 0.15-1.7 s; tiktoken's encoder from its record: 0.03-0.2 s), and it saves CPU
# per MB of text encoded: 0.03-0.11 s against tiktoken, 0.45-1.8 s against HF (docs/benchmarks.md, "When
# fastokens pays"). So it runs where the input is at least this many times its tokenizer.json: where
# the measured load costs less than it saves on one worker, with a margin. Decided on sizes alone, never
# the worker count: the manifest records the backend, and a build's folder is the same bytes whatever
# --workers is.
OVER_TIKTOKEN = 3.0  # break-even measured at 2.4x (GPT-2), 2.1x (Llama 3), 6.6x (Qwen3) the JSON's size
OVER_HF = 0.25  # break-even measured at 0.18x (Gemma 3), 0.07x (DeepSeek V3), 0.12x (Mistral v3)
_FASTER: dict = {}  # (fingerprint, split_special) -> FastokensEncoder, or None where it did not pass


def version() -> str | None:
    """The installed fastokens' version, or None where it is not installed."""
    os.environ.setdefault("FASTOKENS_BPE_THREADS", "1")  # read when its pool starts: before any encode
    try:
        import fastokens  # noqa: F401
        from importlib.metadata import version as v

        return v("fastokens")
    except Exception:  # not installed, or a broken install: tiktoken stays
        return None


def worth_it(input_bytes: int, json_chars: int, versus: str = "tiktoken") -> bool:
    """Whether a build of ``input_bytes`` (its input files' sizes on disk) should load fastokens for a
    tokenizer.json of ``json_chars`` rather than run ``versus`` ("tiktoken" | "hf")."""
    return input_bytes >= json_chars * (OVER_TIKTOKEN if versus == "tiktoken" else OVER_HF)


class FastokensEncoder:
    """Encodes texts to HF's ids with fastokens; the interface of ``TiktokenEncoder``, whose
    ``base`` (the checked tiktoken encoder of the same tokenizer) lends it the added-token
    scan and the HF fallback."""

    backend = BACKEND

    def __init__(self, tokenizer_json: str | None, base, prep=None):
        self.base, self.conv, self.split_special = base, base.conv, base.split_special
        self._flat = None  # tokenizer_json None: fastokens missing here, HF encodes every text (same ids)
        if tokenizer_json is not None:
            version()
            import fastokens

            self._flat = _load(tokenizer_json).encode_batch_flat  # ValueError: a part it lacks
        self._prep = prep  # text -> the text fastokens encodes (fastokens_alone.py: Metaspace's prefix), or None
        self._needs_hf = base._needs_hf

    @property
    def to_hf(self) -> int:
        return self.base.to_hf  # texts handed to HF so far

    def _ids(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, lengths) of ``texts``, back to back, no EOS: fastokens for those it may see."""
        needs_hf = self._needs_hf
        hf_at = [i for i, t in enumerate(texts) if needs_hf(t)]
        skip = set(hf_at)
        fast = texts if not hf_at else [t for i, t in enumerate(texts) if i not in skip]
        if self._prep is not None:
            fast = list(map(self._prep, fast))
        try:
            if self._flat is None:
                raise LookupError("fastokens is not installed here")
            raw, offs = self._flat(fast, add_special_tokens=False)
            ids, lengths = np.frombuffer(raw, np.uint32), np.diff(np.frombuffer(offs, np.uint64)).astype(np.int64)
        except Exception:  # lone surrogates, a regex limit: HF's ids, or HF's error
            hf_at, ids, lengths = list(range(len(texts))), np.zeros(0, np.uint32), np.zeros(0, np.int64)
        if not hf_at:
            return ids, lengths
        # The rare batch with texts for HF: one array per text, in order.
        parts = np.split(ids, np.cumsum(lengths)[:-1]) if len(lengths) else []
        fast_parts = iter(parts)
        from_hf = iter(self.base._hf_encode([texts[i] for i in hf_at]))
        skip = set(hf_at)
        arrays = [np.array(next(from_hf), np.uint32) if i in skip else next(fast_parts) for i in range(len(texts))]
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        return (np.concatenate(arrays) if arrays else np.zeros(0, np.uint32)), lengths

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """One uint32 array of ids per text (no EOS)."""
        ids, lengths = self._ids(texts)
        return np.split(ids, np.cumsum(lengths)[:-1]) if len(texts) else []

    def encode_lists(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids (no EOS)."""
        return [a.tolist() for a in self.encode_arrays(texts)]

    def encode_flat(self, texts: list[str], eos, prefix: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
        """(ids, lengths) as ``TiktokenEncoder.encode_flat``: every text's ``prefix``, its ids, then
        ``eos`` (an id, a tuple of ids or None), uint32; lengths int64, prefix and suffix included."""
        ids, lengths = self._ids(texts)
        return with_around(ids, lengths, tuple(prefix), () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos))


def preload(tokenizer_json: str) -> None:
    """Start fastokens' load of ``tokenizer_json`` in a thread (a first build: its 1-2 s release the GIL
    and run beside the conversion and the hard strings); the next ``FastokensEncoder`` of that very
    JSON takes it (``_load``). ``settle`` joins it: before the build forks its workers."""
    if version() is None or os.environ.get("PACKER_FASTOKENS") == "off":
        return
    _adopt()
    job = _PRELOAD.get("job")
    if job is not None and job[0] == tokenizer_json:
        return
    settle()
    _PRELOAD["job"] = head_start.load_in_thread(tokenizer_json, "packer-fastokens-load")


def settle() -> None:
    """Wait for a ``preload`` still running and drop what it loaded, if nothing took it."""
    _adopt()
    job = _PRELOAD.pop("job", None)
    if job is not None:
        job[1].join()


def _load(tokenizer_json: str):
    """fastokens' tokenizer of ``tokenizer_json``: ``preload``'s, where it loaded that JSON, else loaded now."""
    _adopt()
    job = _PRELOAD.pop("job", None)
    head_start.loaded(tokenizer_json)  # for the next build's head start
    if job is not None:
        job[1].join()
        if job[0] == tokenizer_json:
            if isinstance(job[2][0], BaseException):
                raise job[2][0]
            return job[2][0]
    import fastokens

    return fastokens.Tokenizer.from_json_str(tokenizer_json)


_PRELOAD: dict = {}  # "job": (tokenizer JSON, thread, [the tokenizer or its exception])


def _adopt() -> None:
    """The command's head start (packer/head_start.py), begun before packer was imported, as the preload:
    taken by the next load of that very JSON text, joined by ``settle`` like any other."""
    job = head_start.take()
    if job is None:
        return
    if "job" in _PRELOAD:  # (not expected: a head start is taken by the first preload, settle or load)
        job[1].join()
        return
    _PRELOAD["job"] = job


def with_around(ids: np.ndarray, lengths: np.ndarray, pre: tuple, post: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` (texts back to back, ``lengths`` each) with ``pre`` before and ``post`` after every text."""
    k = len(pre) + len(post)
    if not k:
        return ids, lengths
    full = lengths + k
    out = np.empty(len(ids) + k * len(lengths), dtype=np.uint32)
    ends = np.cumsum(full)
    starts = ends - full
    fixed = [(starts + j, v) for j, v in enumerate(pre)] + [(ends - len(post) + j, v) for j, v in enumerate(post)]
    for at, v in fixed:
        out[at] = v
    if len(lengths) <= FEW_TEXTS:  # one slice copy a text: 4x the mask's speed on a chunk of long texts
        src = 0
        for d, n in zip((starts + len(pre)).tolist(), lengths.tolist()):
            out[d : d + n] = ids[src : src + n]
            src += n
        return out, full
    keep = np.ones(len(out), dtype=bool)  # many short texts: one masked copy
    for at, _ in fixed:
        keep[at] = False
    out[keep] = ids
    return out, full


FEW_TEXTS = 128  # texts in a batch up to which with_around copies text by text (measured: 17 texts 0.11 ms
# against 0.42 for the mask, 500 texts 0.43 against 0.36, 400k ids)


def faster(base, tokenizer_json: str, fingerprint: str, get_hf) -> tuple[object, CheckResult | None]:
    """(encoder, its hard-string check): a ``FastokensEncoder`` where fastokens is installed, loads the
    tokenizer and gives HF's ids on ``base``'s hard strings (a pass is recorded, as tiktoken's is);
    else (``base``, None). ``get_hf()``: the HF tokenizer, called only where no pass is recorded."""
    if os.environ.get("PACKER_FASTOKENS") == "off":  # tiktoken alone (its tests; a user who wants it)
        return base, None
    key = (fingerprint, base.split_special)
    if key not in _FASTER:
        _FASTER.clear()
        _FASTER[key] = checked_over(FastokensEncoder, BACKEND, version(), base, tokenizer_json, fingerprint, get_hf)
    got = _FASTER[key]
    return (base, None) if got is None else got


def encoder_for(tokenizer_json: str, base):
    """A ``FastokensEncoder`` over ``base`` for a worker that did not inherit the checked one
    (the parent checked it); ``base`` itself where fastokens is missing here (same ids)."""
    checked = [v[0] for v in _FASTER.values() if v is not None and v[0].base is base]
    if checked:
        return checked[0]
    try:
        return FastokensEncoder(tokenizer_json, base) if version() else base
    except Exception:
        return base


def checked_over(make, backend: str, ver: str | None, base, tokenizer_json: str, fingerprint: str, get_hf):
    """(encoder, its hard-string CheckResult) for ``make(tokenizer_json, base)`` (fastokens' or gigatoken's
    encoder over the checked tiktoken conversion ``base``), the pass recorded per ``backend`` and version
    ``ver``; None where the engine is not installed (``ver`` None), cannot load the tokenizer, or differs."""
    if ver is None:
        return None
    try:
        enc = make(tokenizer_json, base)
    except Exception:  # a component the engine lacks: tiktoken stays
        return None
    strings = hard_strings(base.conv.added) + suspect_strings(base.conv.suspects) + normal_forms(base.conv)
    rec_key = f"{fingerprint}\0{backend} {ver}"
    passed = check_cache.load(rec_key, base.split_special, strings)
    if passed is not None:
        return enc, CheckResult(True, passed["texts"], passed["tokens"], "")
    r = check(enc, get_hf(), strings, "hard string")
    if not r.ok:
        return None
    check_cache.store(rec_key, base.split_special, strings, base.conv.note, r.texts, r.tokens)
    return enc, r
