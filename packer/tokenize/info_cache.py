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

A second, smaller record holds the tokenizer *as used* (tokenizer.json, or
transformers' view of a model folder, with its notes), keyed by the bytes,
``--tokenizer-follows`` and the transformers version but not the options
around the text: a resolve with other options (``--split-special-tokens``,
``--no-eos``, ``--bos``) then parses that JSON instead of building
transformers' view again (about 10 s for Gemma 3 in process). It names the
first record's JSON file rather than copying it.
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


HERE = "\0folder\0"  # in a recorded note: the folder of the build that reads it back


def notes_in(spec: str, notes) -> list[str]:
    """``notes`` as recorded: a note that names ``spec`` names HERE, so a copy of the folder (same bytes) names its own."""
    return [HERE + n[len(spec):] if n.startswith(spec + ": ") else n for n in notes]


def notes_out(spec: str, notes) -> tuple[str, ...]:
    """Recorded ``notes`` as ``spec``'s resolve says them."""
    return tuple(spec + n[len(HERE):] if n.startswith(HERE) else n for n in notes)


def keys(path: str, also: list[str], *options: tuple) -> list[str | None]:
    """The records' names for tokenizer file ``path`` resolved with each of ``options`` (the files read and hashed
    once); None each if unreadable. ``also``: the other files that decide the result (a model folder's configs:
    follows.py)."""
    import tokenizers

    files = hashlib.sha256()
    try:
        for p in (path, *also):
            files.update(f"\0{os.path.basename(p)}\0".encode())
            with open(p, "rb") as f:
                while block := f.read(1 << 22):
                    files.update(block)
    except OSError:
        return [None] * len(options)
    return [hashlib.sha256(f"{VERSION}\0{tokenizers.__version__}\0{o!r}\0{files.hexdigest()}".encode()).hexdigest()[:32]
            for o in options]


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


def load_as_used(name: str | None, spec: str) -> tuple[str, tuple[str, ...]] | None:
    """(the JSON of the tokenizer as used, its notes) from the record ``name``, or None."""
    where = folder("tokenizers")
    rec = read_json(where, name + ".as_used.json") if name is not None else None
    if not isinstance(rec, dict) or not isinstance(rec.get("record"), str) or not isinstance(rec.get("json_chars"), int) \
            or not isinstance(rec.get("notes"), list) or not all(isinstance(n, str) for n in rec["notes"]):
        return None
    text = read_text(where, rec["record"] + ".tokenizer.json")
    if text is None or len(text) != rec["json_chars"]:  # (that record gone or rewritten: resolve again)
        return None
    return text, notes_out(spec, rec["notes"])


def store_as_used(name: str | None, record: str | None, fields: dict) -> None:
    """Record, under ``name``, that the full record ``record`` (stored just before, ``fields``) holds the tokenizer as
    used and its notes: true of every resolve's JSON and notes, whatever its options (tokenizer.py ``_info_of``)."""
    if name is not None and record is not None:
        write_json(folder("tokenizers"), name + ".as_used.json",
                   {"record": record, "json_chars": len(fields["json"]), "notes": fields["notes"]})
