"""Where ``--tokenizer``'s tokenizer.json comes from: a file, a folder holding one, or the hub (its cache first)."""

from __future__ import annotations

import contextlib
import glob
import os
import sys

from ..errors import PackerError


def _local_file(spec: str) -> str | None:
    """The tokenizer.json that ``spec`` names on this machine (a file, or a folder holding one), else None."""
    path = os.path.join(spec, "tokenizer.json") if os.path.isdir(spec) else spec
    return path if os.path.isfile(path) else None


def _load_hf(spec: str):
    from tokenizers import Tokenizer

    if os.path.isdir(spec) and not os.path.exists(os.path.join(spec, "tokenizer.json")):
        raise PackerError(f"no tokenizer.json in folder {spec}")
    path = _local_file(spec)
    if path is not None:
        try:
            return Tokenizer.from_file(path)
        except Exception as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise PackerError(f"cannot load tokenizer {path}: {first}") from None
    looks_like_path = spec.endswith(".json") or spec.startswith((".", "/", "~")) or spec.count("/") > 1
    if looks_like_path:
        raise PackerError(f"tokenizer not found: {spec}")
    cached = _hub_cache_file(spec)
    if cached:
        return Tokenizer.from_file(cached)
    try:
        with _quiet_stderr():  # the hub client logs its network errors; we say one line instead
            return Tokenizer.from_pretrained(spec)
    except Exception:
        raise PackerError(
            f"could not load tokenizer {spec!r} from the hub or its local cache: "
            "pass a path to a tokenizer.json or a folder holding one"
        ) from None


@contextlib.contextmanager
def _quiet_stderr():
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _hub_cache_file(name: str) -> str | None:
    home = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
    )
    pattern = os.path.join(home, "models--" + name.replace("/", "--"), "snapshots", "*", "tokenizer.json")
    hits = sorted(glob.glob(pattern))
    return hits[-1] if hits else None
