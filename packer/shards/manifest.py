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
    return m
