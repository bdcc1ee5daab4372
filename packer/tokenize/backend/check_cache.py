"""A record of backend checks already passed, so a build does not pay for them again.

``choose`` (tiktoken_backend.py) proves or checks a tokenizer before a build
uses tiktoken: the merge conditions over the whole vocabulary and the hard
strings (5.6 s of a 16-worker Llama 3 build's start, serial; docs/benchmarks.md).
Their outcome depends only on the tokenizer definition, the split-special
setting, the hard strings and the two libraries' versions, so a passed check is recorded under
a key of exactly those, and the next build on this machine skips to the check
on its own input sample (which always runs). The conversion it passed (the
tiktoken ranks, 0.8 s of Python for Llama 3's 128 k tokens) is recorded beside
it, so the next build loads it instead (``load_conversion``: NumPy arrays, no
pickle). Refusals are not recorded: they
are cheap, and their messages are recomputed. The check on a build's input sample is recorded too
(``input_key``/``load_input``/``store_input``, keyed by packer/pipeline/backend_check.py on the
sampled inputs' stamps), so a rebuild over unchanged inputs parses no HF tokenizer for it. ``PACKER_CACHE`` names the folder
(default ~/.cache/packer); ``PACKER_CACHE=off`` turns the record off. A
folder that cannot be written is no error: the check simply runs each time.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile

import numpy as np

from ...head_start import cache_root  # (the command's head start reads the folder before packer is imported)

VERSION = "1"  # bump when what the check covers changes


def folder(name: str) -> str | None:
    """The record folder ``name`` under ``cache_root()``; None when records are off."""
    root = cache_root()
    return None if root is None else os.path.join(root, name)


def _folder() -> str | None:
    return folder("backend-checks")


def read_json(where: str | None, name: str):
    """The JSON record ``name`` in folder ``where``, or None (off, absent, unreadable, not JSON)."""
    if where is None:
        return None
    try:
        with open(os.path.join(where, name), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_bytes(where: str | None, name: str) -> bytes | None:
    """The file ``name`` in folder ``where``, or None (off, absent, unreadable)."""
    if where is None:
        return None
    try:
        with open(os.path.join(where, name), "rb") as f:
            return f.read()
    except OSError:
        return None


def read_text(where: str | None, name: str) -> str | None:
    """The text file ``name`` in folder ``where``, or None (off, absent, unreadable, not UTF-8)."""
    if where is None:
        return None
    try:
        with open(os.path.join(where, name), encoding="utf-8", newline="") as f:  # as written: no newline translation
            return f.read()
    except (OSError, ValueError):
        return None


def write_json(where: str | None, name: str, obj) -> None:
    """Record ``obj`` as ``name`` in folder ``where``, atomically; silently not where it cannot be written."""
    write_text(where, name, json.dumps(obj))


def write_text(where: str | None, name: str, text: str) -> None:
    """Write ``text`` as ``name`` in folder ``where``, atomically; silently not where it cannot be written."""
    write_bytes(where, name, text.encode("utf-8"))


def write_bytes(where: str | None, name: str, data: bytes) -> None:
    """Write ``data`` as ``name`` in folder ``where``, atomically; silently not where it cannot be written.
    (Not ``io.atomic.atomic_write``: a record is best effort, and its fault points are the build's.)"""
    if where is None:
        return
    try:
        os.makedirs(where, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(where, name))
    except OSError:
        pass


def _key(fingerprint: str, split_special: bool, hard: list[str]) -> str:
    import tiktoken
    import tokenizers

    # The hard strings themselves are part of what passed: a check with other strings is another check.
    strings = hashlib.sha256("\0".join(hard).encode("utf-8", "surrogatepass")).hexdigest()
    raw = f"{VERSION}\0{fingerprint}\0{split_special}\0{tokenizers.__version__}\0{tiktoken.__version__}\0{strings}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def load(fingerprint: str, split_special: bool, hard: list[str]) -> dict | None:
    """The record of a passed check ({"note", "texts", "tokens"}), or None."""
    rec = read_json(_folder(), _key(fingerprint, split_special, hard) + ".json")
    return rec if isinstance(rec, dict) and {"note", "texts", "tokens"} <= set(rec) else None


def store(fingerprint: str, split_special: bool, hard: list[str], note: str, texts: int, tokens: int) -> None:
    """Record a passed check (atomically; silently not, where the folder cannot be written)."""
    write_json(_folder(), _key(fingerprint, split_special, hard) + ".json", {"note": note, "texts": texts, "tokens": tokens})


def store_conversion(fingerprint: str, split_special: bool, hard: list[str], conv) -> None:
    """Record the ``Conversion`` of a passed check (atomically; silently not where it cannot be written)."""
    if _folder() is None:
        return
    items = sorted(conv.ranks.items(), key=lambda kv: kv[1])
    blob = b"".join(k for k, _ in items)
    meta = {"pat_str": conv.pat_str, "added": list(conv.added), "vocab_size": conv.vocab_size, "note": conv.note,
            "normalize": conv.normalize, "suspects": list(conv.suspects)}
    buf = io.BytesIO()
    np.savez(buf, ids=np.array([i for _, i in items], dtype=np.uint32),
             lens=np.array([len(k) for k, _ in items], dtype=np.uint32),
             blob=np.frombuffer(blob, dtype=np.uint8),
             meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    write_bytes(_folder(), _key(fingerprint, split_special, hard) + ".ranks.npz", buf.getvalue())


def load_conversion(fingerprint: str, split_special: bool, hard: list[str]):
    """The recorded ``Conversion`` of a passed check, or None (none recorded, or unreadable)."""
    from .tiktoken_convert import Conversion

    folder = _folder()
    if folder is None:
        return None
    try:
        with np.load(os.path.join(folder, _key(fingerprint, split_special, hard) + ".ranks.npz"),
                     allow_pickle=False) as z:
            ids, lens, blob = z["ids"].tolist(), z["lens"], z["blob"].tobytes()
            meta = json.loads(z["meta"].tobytes())
        ends = np.cumsum(lens, dtype=np.int64).tolist()
        if len(ids) != len(ends) or (ends and ends[-1] != len(blob)):
            return None
        starts = [0] + ends[:-1]
        ranks = {blob[a:b]: i for a, b, i in zip(starts, ends, ids)}
        return Conversion(meta["pat_str"], ranks, tuple(meta["added"]), int(meta["vocab_size"]), meta["note"],
                          meta["normalize"], tuple(meta["suspects"]))
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        return None


def input_key(parts: list) -> str:
    """The record name of a check on input texts: ``parts`` (the caller's: tokenizer, backend, the sampled
    inputs' stamps) with this module's version and the two libraries' versions."""
    import tiktoken
    import tokenizers

    raw = "\0".join(map(str, [VERSION, tokenizers.__version__, tiktoken.__version__, *parts]))
    return hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def load_input(key: str) -> tuple[int, int] | None:
    """(texts, tokens) of a passed input check on record under ``key``; None (off, absent, damaged)."""
    rec = read_json(folder("input-checks"), key + ".json")
    if not isinstance(rec, dict) or set(rec) != {"texts", "tokens"}:
        return None
    n = (rec["texts"], rec["tokens"])
    return n if all(type(v) is int and v >= 0 for v in n) else None


def store_input(key: str, texts: int, tokens: int) -> None:
    """Record a passed input check (atomically; silently not where the folder cannot be written)."""
    write_json(folder("input-checks"), key + ".json", {"texts": texts, "tokens": tokens})
