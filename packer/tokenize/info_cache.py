"""A record of what ``resolve_tokenizer`` derived from a tokenizer file, so the next build reads it back.

Resolving a tokenizer.json parses it, writes it back out (``to_str``: the
fingerprint is the hash of the tokenizer as used) and lists its vocabulary
(for its size and its special ids): 0.75 s of Llama 3's 128 k tokens, serial,
before any worker starts (docs/benchmarks.md, the 16-worker timeline). All of
it depends only on the file's bytes, the options that choose what goes
around the text, and the ``tokenizers`` version, so it is recorded under a key
of exactly those. A record holds no code: JSON (the fields of a
``TokenizerInfo``), read back only when every field is there with its type.
The folder is check_cache's (``PACKER_CACHE``; ``off`` turns both off); a
folder that cannot be written is no error.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

from .check_cache import cache_root

VERSION = "1"  # bump when what resolve_tokenizer derives changes
_FIELDS = {"kind": str, "vocab_size": int, "eos_id": (int, type(None)), "pad_id": int, "fingerprint": str,
           "json": str, "notes": list, "prefix": list, "suffix": (list, type(None)), "added": str,
           "split_special": bool, "specials": list}


def _folder() -> str | None:
    root = cache_root()
    return None if root is None else os.path.join(root, "tokenizers")


def key(path: str, options: tuple) -> str | None:
    """The record's name for tokenizer file ``path`` resolved with ``options``; None if unreadable."""
    import tokenizers

    h = hashlib.sha256(f"{VERSION}\0{tokenizers.__version__}\0{options!r}\0".encode())
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 22):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()[:32]


def load(name: str | None) -> dict | None:
    """The recorded fields, or None (no record, or one that is damaged or of another shape)."""
    folder = _folder()
    if folder is None or name is None:
        return None
    try:
        with open(os.path.join(folder, name + ".json"), encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or set(rec) != set(_FIELDS):
        return None
    if not all(isinstance(rec[k], t) and not (t is int and isinstance(rec[k], bool)) for k, t in _FIELDS.items()):
        return None
    return rec


def store(name: str | None, fields: dict) -> None:
    """Record ``fields`` (atomically; silently not where the folder cannot be written)."""
    folder = _folder()
    if folder is None or name is None:
        return
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({k: fields[k] for k in _FIELDS}, f)
        os.replace(tmp, os.path.join(folder, name + ".json"))
    except OSError:
        pass
