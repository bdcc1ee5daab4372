"""Where a chat template comes from: the tokenizer's tokenizer_config.json (its ``chat_template``, and
the special tokens the template is given), a chat_template.jinja beside it, or a file given with
``--chat-template``; each read only as a regular file of bounded size, as UTF-8, a fault in one line."""

from __future__ import annotations

import json
import os
import stat

from ...errors import PackerError

MAX_TEMPLATE_BYTES = 4 << 20  # a chat template (real ones: under 40 KB)
MAX_CONFIG_BYTES = 64 << 20  # a tokenizer_config.json (real ones: under 10 MB)


def token_text(v) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or a dict with ``content``."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def read_text(path: str, limit: int, what: str) -> str:
    """A regular file's text, at most ``limit`` bytes, UTF-8; else one line naming it."""
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NONBLOCK)) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise PackerError(f"cannot read {what} {path}: not a regular file")
            data = f.read(limit + 1)
    except OSError as e:
        raise PackerError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise PackerError(f"cannot read {what} {path}: over {limit >> 20} MB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PackerError(f"cannot read {what} {path}: not UTF-8 (byte {e.start})") from None


def read_config(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    text = read_text(path, MAX_CONFIG_BYTES, "the tokenizer config")
    try:
        cfg = json.loads(text)
    except RecursionError:
        raise PackerError(f"cannot read {path}: nested too deeply") from None
    except ValueError as e:
        raise PackerError(f"cannot read {path}: {e}") from None
    if not isinstance(cfg, dict):
        raise PackerError(f"cannot read {path}: a JSON {type(cfg).__name__}, not an object")
    return cfg


def find_template(folder: str, cfg: dict, cfg_path: str, template_file: str | None) -> tuple[str | None, str]:
    if template_file is not None:
        return read_text(template_file, MAX_TEMPLATE_BYTES, "--chat-template"), template_file
    t = cfg.get("chat_template")
    if isinstance(t, list):  # named templates: transformers uses "default"
        t = next((x.get("template") for x in t if isinstance(x, dict) and x.get("name") == "default"), None)
    if isinstance(t, str):
        return t, cfg_path
    jinja_file = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(jinja_file):
        return read_text(jinja_file, MAX_TEMPLATE_BYTES, "the chat template"), jinja_file
    return None, ""
