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

from .check_cache import folder, read_json, write_json

VERSION = "1"  # bump when what resolve_tokenizer derives changes
FIELDS = {"kind": str, "vocab_size": int, "eos_id": (int, type(None)), "pad_id": int, "fingerprint": str,
          "json": str, "notes": list, "prefix": list, "suffix": (list, type(None)), "added": str,
          "split_special": bool, "specials": list}  # the TokenizerInfo fields recorded, with their JSON types


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
    rec = read_json(folder("tokenizers"), name + ".json") if name is not None else None
    if not isinstance(rec, dict) or set(rec) != set(FIELDS):
        return None
    if not all(isinstance(rec[k], t) and not (t is int and isinstance(rec[k], bool)) for k, t in FIELDS.items()):
        return None
    return rec


def store(name: str | None, fields: dict) -> None:
    """Record ``fields`` (atomically; silently not where the folder cannot be written)."""
    if name is not None:
        write_json(folder("tokenizers"), name + ".json", {k: fields[k] for k in FIELDS})
