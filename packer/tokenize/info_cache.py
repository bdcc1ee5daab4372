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

The tokenizer's JSON (``json``, 9 MB for Llama 3) lies beside the record as
its own file, read back as text: inside the record, decoding it as a JSON
string took 0.11 s of every build's serial start (bench/start_cost.py).
"""

from __future__ import annotations

import hashlib
import os

from .backend.check_cache import folder, read_json, read_text, write_json, write_text

VERSION = "4"  # bump when what resolve_tokenizer derives changes
FIELDS = {"kind": str, "vocab_size": int, "eos_id": (int, type(None)), "pad_id": int, "fingerprint": str,
          "json": str, "notes": list, "prefix": list, "suffix": (list, type(None)), "added": str,
          "split_special": bool, "specials": list, "plain_added": list, "follows": str}  # the TokenizerInfo fields recorded, with their JSON types
RECORD = {k: t for k, t in FIELDS.items() if k != "json"} | {"json_chars": int}  # the record; json is its own file


def key(path: str, options: tuple, also: list[str] = ()) -> str | None:
    """The record's name for tokenizer file ``path`` resolved with ``options``; None if unreadable.
    ``also``: the other files that decide the result (a model folder's configs: follows.py)."""
    import tokenizers

    h = hashlib.sha256(f"{VERSION}\0{tokenizers.__version__}\0{options!r}\0".encode())
    try:
        for p in (path, *also):
            h.update(f"\0{os.path.basename(p)}\0".encode())
            with open(p, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
    except OSError:
        return None
    return h.hexdigest()[:32]


def load(name: str | None) -> dict | None:
    """The recorded fields, or None (no record, or one that is damaged or of another shape)."""
    where = folder("tokenizers")
    rec = read_json(where, name + ".json") if name is not None else None
    if not isinstance(rec, dict) or set(rec) != set(RECORD):
        return None
    if not all(isinstance(rec[k], t) and not (t is int and isinstance(rec[k], bool)) for k, t in RECORD.items()):
        return None
    text = read_text(where, name + ".tokenizer.json")
    if text is None or len(text) != rec.pop("json_chars"):
        return None
    return rec | {"json": text}


def store(name: str | None, fields: dict) -> None:
    """Record ``fields`` (atomically, the JSON first: a record is read only with it; silently not
    where the folder cannot be written)."""
    if name is not None:
        where = folder("tokenizers")
        write_text(where, name + ".tokenizer.json", fields["json"])
        write_json(where, name + ".json", {k: fields[k] for k in FIELDS if k != "json"} | {"json_chars": len(fields["json"])})
