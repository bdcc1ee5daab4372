"""The manifest: the build's table of contents, written last (so its presence means the build is complete)."""

from __future__ import annotations

import json

from ..errors import NotABuild, ShardError
from ..io import Storage, storage_for
from ..io import first_line
from .schema import FORMAT_NAME, FORMAT_VERSION, MANIFEST, UNIT_DIR

REQUIRED_KEYS = ("seq_len", "dtype", "shards", "tokenizer", "totals")
MAX_SEQ_LEN = (1 << 31) - 1  # Arrow's fixed_size_list length is an int32
COUNTS = ("rows", "tokens", "pieces", "documents", "documents_split", "padding")  # per shard, summed in totals
TOTALS = COUNTS + ("slots", "trained_tokens", "truncated", "input_files", "input_bytes", "ignored_files")


def read_manifest(out: "str | Storage") -> dict:
    """Load and validate the manifest of the build at ``out`` (a folder, a URI
    prefix, or a ``Storage``); raise ``ShardError`` naming what is wrong."""
    store = out if isinstance(out, Storage) else storage_for(out)
    return parse_manifest(read_manifest_bytes(store), store.path(MANIFEST))


def read_manifest_bytes(store: Storage) -> bytes:
    """manifest.json's bytes; ``NotABuild``/``ShardError`` when it is absent or unreadable."""
    try:
        return store.read(MANIFEST)
    except FileNotFoundError:
        if store.has_folder(UNIT_DIR):
            raise ShardError(f"{store.root}: build is unfinished (no {MANIFEST}); run packer build again with --resume") from None
        raise NotABuild(f"{store.root}: not a packer build (no {MANIFEST})") from None
    except OSError as e:
        raise ShardError(f"{store.path(MANIFEST)}: unreadable manifest ({first_line(e)})") from None


def parse_manifest(data: bytes, path: str) -> dict:
    """The manifest in ``data`` (the bytes of ``path``), checked: ``ShardError`` naming the first problem."""
    try:
        m = json.loads(data)
    except ValueError as e:
        raise ShardError(f"{path}: unreadable manifest ({e})") from None
    except RecursionError:
        raise ShardError(f"{path}: unreadable manifest (nested too deeply)") from None
    check_manifest(m, path)
    return m


def check_manifest(m, path: str, shards: bool = True) -> None:
    """Raise ``ShardError`` if ``m`` is not a manifest this packer reads. ``shards=False``: everything
    but the shard list (the index beside the manifest holds it, checked as columns)."""
    if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
        raise ShardError(f"{path}: not a packer manifest")
    if m.get("format_version") != FORMAT_VERSION:
        raise ShardError(
            f"{path}: format version {m.get('format_version')!r} is not supported "
            f"(this packer reads version {FORMAT_VERSION})"
        )
    for key in REQUIRED_KEYS:
        if key not in m and (shards or key != "shards"):
            raise ShardError(f"{path}: manifest lacks {key!r}")
    problem = _shape_problem(m) or (_shards_problem(m["shards"]) if shards else None)
    if problem:
        raise ShardError(f"{path}: malformed manifest ({problem})")


def _int(v, low: int = 0, high: int = (1 << 63) - 1) -> bool:
    return type(v) is int and low <= v <= high


def _shape_problem(m: dict) -> str | None:
    """The first value of the wrong type or range (what readers index with), or None."""
    if not _int(m["seq_len"], 2, MAX_SEQ_LEN):
        return f"seq_len {_short(m['seq_len'])} is not an integer in 2..{MAX_SEQ_LEN}"
    if m["dtype"] not in ("uint16", "uint32"):
        return f"dtype {_short(m['dtype'])} is not uint16 or uint32"
    for key in ("tokenizer", "totals"):
        if not isinstance(m[key], dict):
            return f"{key} is not an object"
    for key in ("vocab_size", "pad_id", "eos_id"):
        if m.get(key) is not None and not _int(m[key], 0, 1 << 32):
            return f"{key} {_short(m[key])} is not an integer in 0..2**32"
    tok = m["tokenizer"]
    for key in ("vocab_size", "pad_id"):
        if tok.get(key) is not None and not _int(tok[key], 0, 1 << 32):
            return f"tokenizer.{key} {_short(tok[key])} is not an integer in 0..2**32"
    if m.get("vocab_size") is None and tok.get("vocab_size") is None:
        return "no vocab_size"
    for key in TOTALS:
        if key in m["totals"] and not _int(m["totals"][key]):
            return f"totals.{key} {_short(m['totals'][key])} is not a non-negative integer"
    if "columns" in m and (not isinstance(m["columns"], list) or not all(isinstance(c, str) for c in m["columns"])):
        return "columns is not a list of names"
    return None


def _shards_problem(shards) -> str | None:
    if not isinstance(shards, list):
        return "shards is not a list"
    for i, e in enumerate(shards):
        problem = entry_problem(i, e)
        if problem:
            return problem
    return None


def entry_problem(i: int, e) -> str | None:
    """What is wrong with shard entry ``i`` (or None): the check of every entry, one at a time."""
    if not isinstance(e, dict):
        return f"shard entry {i} is not an object"
    if not isinstance(e.get("path"), str):
        return f"shard entry {i}: path {_short(e.get('path'))} is not a string"
    for key in ("rows", "bytes"):
        if key not in e:
            return f"shard entry {i} lacks {key!r}"
    for key in COUNTS + ("bytes", "trained_tokens"):
        if key in e and not _int(e[key]):
            return f"shard entry {i}: {key} {_short(e[key])} is not a non-negative integer"
    if e.get("unit") is not None and not _int(e["unit"], 0, 10**12):
        return f"shard entry {i}: unit {_short(e['unit'])} is not a non-negative integer"
    if "xxh3_128" in e and not isinstance(e["xxh3_128"], str):
        return f"shard entry {i}: xxh3_128 {_short(e['xxh3_128'])} is not a string"
    return None


def _short(v) -> str:
    """``repr(v)``, cut to a readable length (a hostile value may be megabytes)."""
    r = repr(v) if not isinstance(v, (dict, list)) else type(v).__name__
    return r if len(r) <= 60 else r[:57] + "..."
