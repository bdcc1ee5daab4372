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
encodes with, then); without it, the recorded rule below (``_by_rule``:
``LlamaTokenizer``'s components, the config's special tokens) stands in. Where
the file and transformers disagree, one note says so and which one the build
follows; ``--tokenizer-follows file`` runs tokenizer.json as it is. A lone
tokenizer.json (not a folder) is run as it is: there is no class to follow.
"""

from __future__ import annotations

import contextlib
import io
import json
import os

from .backends import BACKENDS  # noqa: F401,E402 (for the CLI: the choices of both tokenizer options in one import)

FOLLOWS = ("transformers", "file")
CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "config.json")
NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
LLAMA_CLASSES = ("LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer", "CodeLlamaTokenizerFast")
QWEN2_CLASSES = ("Qwen2Tokenizer", "Qwen2TokenizerFast")
# transformers 5's Qwen2Tokenizer split pattern (models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX)
QWEN2_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
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
    except metadata.PackageNotFoundError:
        return "absent"


def folder_of(spec: str) -> str | None:
    """The model folder ``spec`` names (a folder holding tokenizer_config.json), else None."""
    return spec if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "tokenizer_config.json")) else None


def config_paths(spec: str) -> list[str]:
    """The files besides tokenizer.json that decide what transformers builds (for the resolve record's key)."""
    folder = folder_of(spec)
    return [os.path.join(folder, n) for n in CONFIG_FILES if os.path.isfile(os.path.join(folder, n))] if folder else []


def as_used(spec: str, file_tok, follows: str = "transformers"):
    """(the tokenizers.Tokenizer the build encodes with, a note or None).

    ``file_tok``: tokenizer.json as loaded. For a model folder, transformers' view
    (``transformers_view``) is compared with it; where they differ the note names
    the parts and the one followed."""
    folder = folder_of(spec)
    if folder is None:
        return file_tok, None
    view, who, trouble = transformers_view(folder, file_tok)
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


def transformers_view(folder: str, file_tok):
    """(the tokenizer transformers builds from ``folder`` or None, who built it, why not)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return _by_rule(folder, file_tok), "transformers' rule for " + (_config_class(folder) or "its class"), None
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
    view = Tokenizer.from_str(backend.to_str())  # our own copy: the transformers object is left alone
    view.encode_special_tokens = False
    return view, f"transformers ({type(tt).__name__})", None


def differences(a, b) -> list[str]:
    """The parts (normalizer, pre-tokenizer, model, post-processor, special tokens) in which two tokenizers differ."""
    da, db = json.loads(a.to_str()), json.loads(b.to_str())
    for d in (da, db):  # transformers puts a template that adds nothing where the file has none: the same ids
        d["post_processor"] = None if d.get("post_processor") == _NOOP_TEMPLATE else d.get("post_processor")
    out = [name for key, name in _PARTS if da.get(key) != db.get(key)]
    added = [(t["id"], t["content"], t.get("special")) for t in da.get("added_tokens") or []]
    if added != [(t["id"], t["content"], t.get("special")) for t in db.get("added_tokens") or []]:
        out.append("added/special tokens")
    return out


_NOOP_TEMPLATE = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                  "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                  "special_tokens": {}}  # what TokenizersBackend.update_post_processor sets with no BOS/EOS flag


def _config(folder: str, name: str) -> dict:
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            got = json.load(f)
        return got if isinstance(got, dict) else {}
    except (OSError, ValueError):
        return {}


def _config_class(folder: str) -> str | None:
    cls = _config(folder, "tokenizer_config.json").get("tokenizer_class")
    return cls if isinstance(cls, str) else None


def named_specials(folder: str, extra: bool = True) -> list[str]:
    """The special tokens the config names (special_tokens_map.json and tokenizer_config.json): ``NAMED``,
    then (``extra``) additional_special_tokens / extra_special_tokens."""
    out: list[str] = []
    for cfg in (_config(folder, "special_tokens_map.json"), _config(folder, "tokenizer_config.json")):
        values = [cfg.get(k) for k in NAMED]
        for k in ("additional_special_tokens", "extra_special_tokens") if extra else ():
            extra = cfg.get(k)
            values += list(extra.values()) if isinstance(extra, dict) else list(extra or [])
        for v in values:
            v = v.get("content") if isinstance(v, dict) else v
            if isinstance(v, str) and v and v not in out:
                out.append(v)
    return out


def _by_rule(folder: str, file_tok):
    """What transformers 5.x builds, without transformers: the file's model and added tokens; for the
    Llama classes, LlamaTokenizer's own normalizer (none), Metaspace pre-tokenizer and decoder; for the
    Qwen2 classes, Qwen2Tokenizer's NFC, split pattern and ByteLevel; for both, their BPE flags; the
    config's named special tokens (``NAMED``) marked special; those it names besides, special where
    the vocabulary lacks them (transformers adds them) and as tokenizer.json has them otherwise."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors

    cfg, cls = _config(folder, "tokenizer_config.json"), _config_class(folder)
    d = json.loads(file_tok.to_str())
    bpe = (d.get("model") or {}).get("type") == "BPE"
    if cls in LLAMA_CLASSES and bpe:
        # LlamaTokenizer.__init__: BPE(vocab, merges, fuse_unk=True, byte_fallback=True, dropout=None), no unk_token
        d["model"].update(unk_token=None, fuse_unk=True, byte_fallback=True, dropout=None)
    if cls in QWEN2_CLASSES and bpe:  # Qwen2Tokenizer.__init__'s BPE
        d["model"].update(unk_token=None, fuse_unk=False, byte_fallback=False, dropout=None, ignore_merges=False,
                          continuing_subword_prefix="", end_of_word_suffix="")
    tok = Tokenizer.from_str(json.dumps(d))
    if cls in QWEN2_CLASSES and bpe:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=bool(cfg.get("add_prefix_space") or False), use_regex=False)])
        tok.decoder = decoders.ByteLevel()
    if cls in LLAMA_CLASSES:
        prefix = cfg.get("add_prefix_space")
        prefix = True if prefix is None else bool(prefix)
        scheme = ("always" if cfg.get("legacy", False) else "first") if prefix else "never"
        tok.normalizer = None
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=False)
        steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        tok.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1)] if prefix else []))
    have = {t.content: t for t in tok.get_added_tokens_decoder().values()}
    named = set(named_specials(folder, extra=False))
    marks = []
    for s in named_specials(folder):
        t = have.get(s)
        if t is None or (not t.special and s in named):  # an extra one already there stays as it is
            marks.append(AddedToken(s, special=True, normalized=False) if t is None else
                         AddedToken(s, single_word=t.single_word, lstrip=t.lstrip, rstrip=t.rstrip,
                                    normalized=t.normalized, special=True))
    if marks:
        tok.add_special_tokens(marks)
    if tok.post_processor is None:  # TokenizersBackend.update_post_processor (transformers 5 drops the add_*_token flags)
        tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    return tok
