"""The tokenizer as transformers builds it from a model folder, where that differs from tokenizer.json.

``AutoTokenizer.from_pretrained(folder)`` does not always run the folder's
tokenizer.json as it is. The tokenizer class that tokenizer_config.json names
(or config.json's model type implies) may rebuild components: transformers 5's
``LlamaTokenizer`` replaces the file's normalizer (Prepend + Replace) with a
``Metaspace`` pre-tokenizer, which encodes "  two" and text right after a special
token differently. And the config's named special tokens (``mask_token``,
``additional_special_tokens``, special_tokens_map.json) are special to
transformers even where tokenizer.json marks them plain (Gemma 3's ``<mask>``):
``split_special_tokens`` splits them, and they are counted as special.

A model trains on what transformers gives, so packer follows transformers by
default (``--tokenizer-follows transformers``): the installed transformers builds
the tokenizer when it is importable (its backend tokenizer is what packer
encodes with, then); without it, the recorded rule of follows_rule.py (read from
transformers 5.24: the class AutoTokenizer picks, the components of the classes
it rebuilds, the config's special tokens) stands in, and a folder whose class
it has no rule for is refused (one line: install transformers, or pass
``--tokenizer-follows file``). Where the file and transformers disagree, one
note says so and which one the build follows (said at the start of the build);
``--tokenizer-follows file`` runs tokenizer.json as it is. A lone tokenizer.json
(not a folder) is run as it is: there is no class to follow.
"""

from __future__ import annotations

import contextlib
import io
import json
import os

from .follows_rule import RULE_VERSION, RULES, Refused, json_members, auto_class, by_rule

FOLLOWS = ("transformers", "file")
CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "config.json")
_PARTS = (("normalizer", "normalizer"), ("pre_tokenizer", "pre-tokenizer"), ("model", "model"),
          ("post_processor", "post-processor"))


def check_follows(name: str) -> str:
    """``name`` if it is one of ``FOLLOWS``, else ``PackerError`` (one line naming the choices)."""
    from ..errors import PackerError

    if name not in FOLLOWS:
        raise PackerError(f"unknown --tokenizer-follows {name!r}: choose from {', '.join(FOLLOWS)}")
    return name


def transformers_version(spec: str) -> str | None:
    """The installed transformers' version where it decides what ``spec`` is (a model folder), else None."""
    if folder_of(spec) is None:
        return None
    from importlib import metadata

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:  # the recorded rule decides: its version keys the resolve record
        return f"absent (rule {RULE_VERSION})"


def folder_of(spec: str) -> str | None:
    """The model folder ``spec`` names (a folder holding tokenizer_config.json), else None."""
    return spec if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "tokenizer_config.json")) else None


def config_eos(spec: str) -> str | None:
    """The ``eos_token`` tokenizer_config.json of model folder ``spec`` names (a string or an AddedToken dict), else None."""
    folder = folder_of(spec)
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
            eos = json.load(f).get("eos_token")
    except (OSError, ValueError, AttributeError):
        return None
    eos = eos.get("content") if isinstance(eos, dict) else eos
    return eos if isinstance(eos, str) and eos else None


def config_paths(spec: str) -> list[str]:
    """The files besides tokenizer.json that decide what transformers builds (for the resolve record's key)."""
    folder = folder_of(spec)
    return [os.path.join(folder, n) for n in CONFIG_FILES if os.path.isfile(os.path.join(folder, n))] if folder else []


def guess(spec: str, file_tok, follows: str = "transformers", file_json: str | None = None):
    """(the tokenizer ``as_used`` will most likely return, its JSON), cheaply and before transformers
    answers: for a class follows_rule.py rebuilds, the rule's tokenizer (transformers 5.24's, to the
    byte, on every family the suite knows); else ``file_tok``. Only a guess: a build checks its
    backend on it while the view is built, and ``as_used`` decides. ``file_json``: ``file_tok.to_str()``, if at hand."""
    folder = folder_of(spec)
    if folder is None or follows == "file":
        return file_tok, None
    try:
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            cls = auto_class(folder, spec, f.read())
        if cls not in RULES:
            return file_tok, None
        view, _ = by_rule(folder, spec, file_tok, file_json)
    except (Refused, OSError, ValueError, KeyError, TypeError, AttributeError):  # a guess: as_used says why
        return file_tok, None
    return (file_tok, None) if view is None else (view, view.to_str())


def as_used(spec: str, file_tok, follows: str = "transformers", pending=None, guessed=None,
            file_json: str | None = None):
    """(the tokenizers.Tokenizer the build encodes with, a note or None).

    ``file_tok``: tokenizer.json as loaded. For a model folder, transformers' view
    (``transformers_view``) is compared with it; where they differ the note names
    the parts and the one followed. ``pending``: view_child.start's child, which built
    the view out of process and sends its JSON (None, or no answer from it: built here);
    ``guessed``: ``guess``'s (tokenizer, JSON), returned where the child's view is that JSON; ``file_json``:
    ``file_tok.to_str()``, if at hand (the parts compared ignore truncation and padding)."""
    folder = folder_of(spec)
    if folder is None:
        return file_tok, None
    got = pending.result() if pending is not None else None
    if got is not None:
        view_json, who, trouble = got
        if trouble is not None:
            return file_tok, trouble
        parts = _differences(file_tok.to_str() if file_json is None else file_json, view_json)  # the child has no file
        view = None
        if parts and guessed is not None and guessed[1] == view_json:
            view = guessed[0]  # the same bytes: no second parse
        elif parts:
            from tokenizers import Tokenizer

            view = Tokenizer.from_str(view_json)
            view.encode_special_tokens = False
    else:
        try:
            view, who, trouble = transformers_view(folder, file_tok, spec)
        except Refused as e:  # no transformers, and no recorded rule for what it would build
            if follows == "file":
                return file_tok, None
            from ..errors import PackerError

            raise PackerError(f"{folder}: transformers is not importable and {e}; install transformers "
                              "(pip install transformers) or pass --tokenizer-follows file to run tokenizer.json as it is")
        if view is None:
            return file_tok, trouble
        parts = differences(file_tok, view)
    if not parts:
        return file_tok, None
    if follows == "file":
        return file_tok, (f"{folder}: tokenizer.json and {who} differ in the {', '.join(parts)}; packer follows "
                          "tokenizer.json (--tokenizer-follows file; drop it to follow transformers)")
    return view, (f"{folder}: tokenizer.json and {who} differ in the {', '.join(parts)}; packer follows "
                  "transformers, as a model trained with it sees the text (--tokenizer-follows file: the file)")


def transformers_view(folder: str, file_tok, spec: str | None = None, copy: bool = True):
    """(the tokenizer transformers builds from ``folder`` or None, who built it, why not). Without transformers,
    follows_rule.by_rule (which raises ``Refused`` where it records no rule). ``copy=False``: transformers'
    own tokenizer object, not a copy (view_child.py, which only reads its JSON: 0.6 s less for Qwen3)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        view, cls = by_rule(folder, spec or folder, file_tok)
        if view is None:
            return None, "", (f"{folder}: transformers would load it as {cls}, with no tokenizers backend; "
                              "packer follows tokenizer.json")
        return view, f"transformers' rule for {cls or 'TokenizersBackend'}", None
    from tokenizers import Tokenizer

    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            tt = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as e:  # a class it lacks, remote code it will not run, a file it cannot read
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        return None, "", f"{folder}: transformers cannot load it ({first}); packer follows tokenizer.json"
    backend = getattr(tt, "backend_tokenizer", None)
    if backend is None:  # a Python-only tokenizer: packer has no way to run it but the file
        return None, "", (f"{folder}: transformers loads it as {type(tt).__name__}, with no tokenizers backend; "
                          "packer follows tokenizer.json")
    if not copy:
        return backend, f"transformers ({type(tt).__name__})", None
    view = Tokenizer.from_str(backend.to_str())  # our own copy: the transformers object is left alone
    view.encode_special_tokens = False
    return view, f"transformers ({type(tt).__name__})", None


def differences(a, b) -> list[str]:
    """The parts (normalizer, pre-tokenizer, model, post-processor, special tokens) in which two tokenizers differ.
    The JSON of the two, byte for byte the same, or the same from the model on, is not parsed whole (the
    model is most of it: a second for Qwen3's two): the same text is the same value."""
    return _differences(a.to_str(), b.to_str())


def _differences(sa: str, sb: str) -> list[str]:
    """``differences`` of two tokenizers' JSON (``to_str``)."""
    if sa == sb:
        return []
    ta, tb = _before_model(sa), _before_model(sb)
    if ta is not None and tb is not None and ta[1] == tb[1]:
        da, db = ta[0], tb[0]  # neither holds the model, the same in both
    else:
        da, db = json.loads(sa), json.loads(sb)
    for d in (da, db):  # a template that adds nothing (transformers' where the file has none, GPTNeoXTokenizer's
        # over the file's), or a ByteLevel post-processor (it trims offsets, adds no id): the same ids as none
        pp = d.get("post_processor")
        d["post_processor"] = None if pp == _NOOP_TEMPLATE or (pp or {}).get("type") == "ByteLevel" else pp
    out = [name for key, name in _PARTS if da.get(key) != db.get(key)]
    added = [(t["id"], t["content"], t.get("special")) for t in da.get("added_tokens") or []]
    if added != [(t["id"], t["content"], t.get("special")) for t in db.get("added_tokens") or []]:
        out.append("added/special tokens")
    return out


def _before_model(text: str) -> tuple[dict, str] | None:
    """(the top-level members of the JSON object ``text`` before its "model", parsed; the text from the
    model's value to the end), or None where ``text`` is not such an object or has no model."""
    got = json_members(text, "model")
    return got if got is not None and got[1] is not None else None


_NOOP_TEMPLATE = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                  "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                  "special_tokens": {}}  # what TokenizersBackend.update_post_processor sets with no BOS/EOS flag
