"""The manifest: the build's table of contents, written last (so its presence means the build is complete)."""

from __future__ import annotations

import json

from ..errors import NotABuild, ShardError
from ..io import Storage, storage_for
from ..io.uri import first_line
from .schema import FORMAT_NAME, FORMAT_VERSION, MANIFEST, UNIT_DIR

REQUIRED_KEYS = ("seq_len", "dtype", "shards", "tokenizer", "totals")


def read_manifest(out: "str | Storage") -> dict:
    """Load and validate the manifest of the build at ``out`` (a folder, a URI
    prefix, or a ``Storage``); raise ``ShardError`` naming what is wrong."""
    store = out if isinstance(out, Storage) else storage_for(out)
    path = store.path(MANIFEST)
    try:
        data = store.read(MANIFEST)
    except FileNotFoundError:
        if store.has_folder(UNIT_DIR):
            raise ShardError(f"{store.root}: build is unfinished (no {MANIFEST}); run packer build again with --resume") from None
        raise NotABuild(f"{store.root}: not a packer build (no {MANIFEST})") from None
    except OSError as e:
        raise ShardError(f"{path}: unreadable manifest ({first_line(e)})") from None
    try:
        m = json.loads(data)
    except ValueError as e:
        raise ShardError(f"{path}: unreadable manifest ({e})") from None
    except RecursionError:
        raise ShardError(f"{path}: unreadable manifest (nested too deeply)") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
        raise ShardError(f"{path}: not a packer manifest")
    if m.get("format_version") != FORMAT_VERSION:
        raise ShardError(
            f"{path}: format version {m.get('format_version')} is not supported "
            f"(this packer reads version {FORMAT_VERSION})"
        )
    for key in REQUIRED_KEYS:
        if key not in m:
            raise ShardError(f"{path}: manifest lacks {key!r}")
    problem = _shape_problem(m)
    if problem:
        raise ShardError(f"{path}: malformed manifest ({problem})")
    return m


def _int(v, low: int = 0) -> bool:
    return type(v) is int and v >= low


def _shape_problem(m: dict) -> str | None:
    """The first value of the wrong type or range (what readers index with), or None."""
    if not _int(m["seq_len"], 2):
        return f"seq_len {m['seq_len']!r} is not an integer >= 2"
    if m["dtype"] not in ("uint16", "uint32"):
        return f"dtype {m['dtype']!r} is not uint16 or uint32"
    for key in ("tokenizer", "totals"):
        if not isinstance(m[key], dict):
            return f"{key} is not an object"
    for key in ("vocab_size", "pad_id"):
        if key in m and m[key] is not None and not _int(m[key]):
            return f"{key} {m[key]!r} is not a non-negative integer"
    if not isinstance(m["shards"], list):
        return "shards is not a list"
    for i, e in enumerate(m["shards"]):
        if not isinstance(e, dict):
            return f"shard entry {i} is not an object"
        if not isinstance(e.get("path"), str):
            return f"shard entry {i}: path {e.get('path')!r} is not a string"
        for key in ("rows", "bytes"):
            if key in e and not _int(e[key]):
                return f"shard entry {i}: {key} {e[key]!r} is not a non-negative integer"
    return None
