"""What transformers builds from a model folder, without transformers: the recorded rule (follows.py).

Read from transformers 5.24.0, checked unchanged in 5.25.0 (transformers_table.py holds what it decides by name).
``AutoTokenizer.from_pretrained(folder)`` first picks a class (``auto_class``,
in models/auto/tokenization_auto.py's order: remote code, the patterns of hub
names it loads as they are, a "LlamaTokenizer" over a byte-level file, the
class config.json's model_type registers against the one tokenizer_config.json
names, then that name, config.json's tokenizer_class, the model type's class).
``TokenizersBackend`` and its subclasses without an ``__init__`` of their own
load tokenizer.json as it is. A subclass with one (``REBUILDS``) is built from
the file's vocab and merges with its own normalizer, pre-tokenizer, decoder and
model flags: the classes in ``RULES`` are rebuilt here as their ``__init__``
does; the others are refused (``Refused``: the build says to install
transformers or pass ``--tokenizer-follows file``), as are remote code and a
config whose added tokens are not the file's. Then, for every class, the
config's named special tokens (with the class's defaults) are marked special.
docs/tokenizers.md has the table; tests/tokenize/test_follows_rule.py holds
each rule equal to what transformers builds.
"""

from __future__ import annotations

import fnmatch
import json
import os

from . import transformers_table as T

NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
GENERIC = ("TokenizersBackend", "PythonBackend", "PreTrainedTokenizerFast", "MistralCommonBackend")
_REGISTERED = {t: cls for cls, types in T.MODEL_TYPES.items() for t in types.split()}
# transformers 5.24's split patterns (models/qwen2/tokenization_qwen2.py, models/qwen3_5/tokenization_qwen3_5.py)
QWEN2_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN3_5_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
                   r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
_EOT = "<|endoftext|>"
# each rebuilt class's defaults for the named tokens (its __init__'s keyword defaults)
DEFAULTS = {
    "LlamaTokenizer": {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
    "GemmaTokenizer": {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
                       "mask_token": "<mask>"},
    "Qwen2Tokenizer": {"unk_token": _EOT, "eos_token": _EOT, "pad_token": _EOT},
    "Qwen3_5Tokenizer": {"unk_token": _EOT, "eos_token": _EOT, "pad_token": _EOT},
    "GPTNeoXTokenizer": {"unk_token": _EOT, "bos_token": _EOT, "eos_token": _EOT, "pad_token": "<|padding|>"},
    "CohereTokenizer": {"unk_token": "<UNK>", "bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>",
                        "pad_token": "<PAD>", "cls_token": "<CLS>", "sep_token": "<SEP>", "mask_token": "<MASK_TOKEN>"},
    "GPT2Tokenizer": {"unk_token": _EOT, "bos_token": _EOT, "eos_token": _EOT},
}
RULES = tuple(DEFAULTS)  # the rebuilt classes this module rebuilds; the other REBUILDS are refused
RULE_VERSION = f"transformers {T.VERSION}, 2"  # what a resolve record made without transformers is keyed on


class Refused(Exception):
    """No recorded rule is exact for this folder: one line saying why (the build refuses it)."""


def config(folder: str, name: str) -> dict:
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            got = json.load(f)
        return got if isinstance(got, dict) else {}
    except (OSError, ValueError):
        return {}


def _str(v):
    v = v.get("content") if isinstance(v, dict) else v
    return v if isinstance(v, str) and v else None


def named_specials(folder: str, extra: bool = True, defaults: dict | None = None) -> list[str]:
    """The special tokens the config names (special_tokens_map.json and tokenizer_config.json): ``NAMED``
    (the class's ``defaults`` where neither names one), then (``extra``) additional/extra_special_tokens."""
    cfgs = (config(folder, "special_tokens_map.json"), config(folder, "tokenizer_config.json"))
    out: list[str] = []
    for cfg in cfgs + ({k: v for k, v in (defaults or {}).items() if not any(k in c for c in cfgs)},):
        values = [cfg.get(k) for k in NAMED]
        for k in ("additional_special_tokens", "extra_special_tokens") if extra else ():
            more = cfg.get(k)
            values += list(more.values()) if isinstance(more, dict) else list(more or [])
        out += [s for s in map(_str, values) if s and s not in out]
    return out


def _base(name) -> str | None:
    """A class name as AutoTokenizer resolves it ("Fast" dropped); None: TokenizersBackend (a generic or unknown
    name, or a subclass that loads the file as it is)."""
    if not isinstance(name, str) or not name:
        return None
    n = name if name == "PreTrainedTokenizerFast" else name.removesuffix("Fast")
    return n if n in T.REBUILDS or n in T.PYTHON else None


def auto_class(folder: str, spec: str, text: str) -> str | None:
    """The class ``AutoTokenizer.from_pretrained(spec)`` picks for ``folder`` (``_base``'s form); ``text``:
    its tokenizer.json. Raises ``Refused`` for remote code."""
    tc, cc = config(folder, "tokenizer_config.json"), config(folder, "config.json")
    if tc.get("auto_map"):
        raise Refused("its tokenizer_config.json names remote code (auto_map), which only transformers can run")
    mtype = cc.get("model_type") if isinstance(cc.get("model_type"), str) else None
    reg = (_REGISTERED.get(mtype) or "").removesuffix("Fast") or None
    if cc and any(fnmatch.fnmatch(spec.lower(), p) for p in T.NAMES_AS_FILE):
        return None
    hub = tc.get("tokenizer_class") or cc.get("tokenizer_class")
    hub = hub if isinstance(hub, str) and hub else None
    if (hub and hub.removesuffix("Fast") == "LlamaTokenizer" and reg != "MistralCommonBackend"
            and mtype not in T.INCORRECT_HUB_CLASS and '"ByteLevel"' in text):
        return None  # a byte-level file that names LlamaTokenizer (Llama 3, DeepSeek): loaded as it is
    if hub and reg and reg != hub.removesuffix("Fast"):
        return _base(reg if mtype in T.INCORRECT_HUB_CLASS else hub) if reg not in GENERIC else None
    if hub:
        return _base(hub)
    return _base(reg) if mtype else None


def by_rule(folder: str, spec: str, file_tok, file_json: str | None = None):
    """(the tokenizer transformers 5.24 builds from ``folder``, its class or None) without transformers: the
    file's model, components and added tokens, rebuilt for the classes in ``RULES``; the config's named
    special tokens marked special. Raises ``Refused`` where no rule is recorded. ``file_json``: ``file_tok.to_str()``
    where the caller has it."""
    from tokenizers import Tokenizer, processors

    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        text = f.read()
    cls = auto_class(folder, spec, text)
    if cls in T.PYTHON:
        return None, cls
    if cls in T.REBUILDS and cls not in RULES:
        raise Refused(f"transformers' {cls} rebuilds the tokenizer from the file's vocabulary with components "
                      f"of its own, and packer records no rule for it")
    cfg = config(folder, "tokenizer_config.json")
    file_json = file_tok.to_str() if file_json is None else file_json
    d, tail = _open(file_json, whole=bool(cfg.get("fix_mistral_regex")))
    _same_added_tokens(cfg, d)
    _mistral_regex(folder, cfg, d)
    if cls is not None:
        if (d.get("model") or {}).get("type") != "BPE":
            raise Refused(f"transformers' {cls} builds a BPE model, and tokenizer.json's model is "
                          f"{(d.get('model') or {}).get('type')}")
        keys = set(d["model"])
        _MODEL[cls](d["model"], cfg)
        if tail is not None and set(d["model"]) != keys:  # a flag the head did not hold: written whole
            d, tail = _open(file_json, whole=True)
            _same_added_tokens(cfg, d)
            _MODEL[cls](d["model"], cfg)
    tok = Tokenizer.from_str(json.dumps(d) if tail is None else _close(d, tail))
    if cls is not None:
        _PARTS[cls](tok, cfg)
    _mark_specials(tok, folder, DEFAULTS.get(cls))
    if tok.post_processor is None or cls == "GPTNeoXTokenizer":
        # TokenizersBackend.update_post_processor, with no add_bos/eos_token (a folder's are dropped);
        # GPTNeoXTokenizer.__init__ calls it whatever the file has
        tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    return tok, cls


def _open(text: str, whole: bool = False) -> tuple[dict, str | None]:
    """tokenizers' JSON ``text`` as (a dict, None), or, where its model is the last member and its vocab
    comes after the model's flags (tokenizers' own order): (the dict with the model's members before
    "vocab" alone, the text from "vocab" on), which ``_close`` puts back. The vocab and merges (most of
    the text: 0.6 s of Qwen3's parse and write, and its escapes slowed the parse back) stay text."""
    if not whole:
        got = json_members(text, "model")
        if got is not None and got[1] is not None and _TOP <= set(got[0]):  # every other member before the model
            top, rest = got
            head = json_members(rest, "vocab")
            if head is not None and head[1] is not None and rest.rstrip().endswith("}}"):
                return {**top, "model": head[0]}, head[1]
    return json.loads(text), None


_TOP = {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder"}


def _close(d: dict, tail: str) -> str:
    """``_open``'s (dict, tail) as one JSON text again."""
    top = json.dumps({k: v for k, v in d.items() if k != "model"})
    head = json.dumps(d["model"])
    return f"{top[:-1]}{', ' if len(top) > 2 else ''}\"model\": {head[:-1]}{', ' if len(head) > 2 else ''}{tail}"


def json_members(text: str, stop: str) -> tuple[dict, str | None] | None:
    """The members of the JSON object ``text`` before the key ``stop``, parsed, and the text from ``stop``'s
    value on (None where there is no such key); None where ``text`` is not such an object or repeats a key."""
    dec, ws = json.JSONDecoder(), json.decoder.WHITESPACE
    try:
        i = ws.match(text, 0).end()
        if text[i] != "{":
            return None
        out, i = {}, i + 1
        while True:
            at = ws.match(text, i).end()
            key, i = dec.raw_decode(text, at)
            i = ws.match(text, i).end()
            if not isinstance(key, str) or key in out or text[i] != ":":
                return None
            i = ws.match(text, i + 1).end()
            if key == stop:
                return out, (text[at:] if stop == "vocab" else text[i:])
            out[key], i = dec.raw_decode(text, i)
            i = ws.match(text, i).end()
            if text[i] != ",":
                return (out, None) if text[i] == "}" else None
            i += 1
    except (ValueError, IndexError):
        return None


def _same_added_tokens(cfg: dict, d: dict) -> None:
    """transformers takes the added tokens from tokenizer_config.json's added_tokens_decoder where it has one,
    with its flags (special, lstrip, ...): the rule holds where they are the file's tokens (id and string, as
    in every hub folder transformers saved), and takes the config's flags."""
    dec = cfg.get("added_tokens_decoder")
    if not isinstance(dec, dict) or not dec:
        return
    try:
        theirs = {int(i): t for i, t in dec.items() if isinstance(t, dict)}
    except (TypeError, ValueError):
        theirs = {}
    mine = d.get("added_tokens") or []
    if sorted((i, _str(t)) for i, t in theirs.items()) != sorted((t["id"], t["content"]) for t in mine) \
            or len(theirs) != len(dec):
        raise Refused("its tokenizer_config.json's added_tokens_decoder is not tokenizer.json's added tokens")
    for t in mine:  # AddedToken(**entry): its defaults where the entry leaves a flag out
        e = theirs[t["id"]]
        t.update({k: bool(e.get(k, False)) for k in ("single_word", "lstrip", "rstrip", "special")})
        t["normalized"] = bool(e.get("normalized", not t["special"]))


def _mistral_regex(folder: str, cfg: dict, d: dict) -> None:
    """TokenizersBackend._patch_mistral_regex: with fix_mistral_regex, a vocabulary over 100,000 and a
    config.json from before transformers 5 of a Mistral model type (or none), the split regex is replaced."""
    cc = config(folder, "config.json")
    if not cfg.get("fix_mistral_regex") or not cc or len((d.get("model") or {}).get("vocab") or ()) <= 100000:
        return
    version = str(cc.get("transformers_version") or "0").split(".")[0]
    if (not version.isdigit() or int(version) < 5) and cc.get("model_type") in (
            None, "mistral", "mistral3", "voxtral", "ministral", "pixtral"):
        raise Refused("its tokenizer_config.json asks for fix_mistral_regex, which packer records no rule for")


def _mark_specials(tok, folder: str, defaults: dict | None) -> None:
    """The config's named special tokens (``NAMED``, the class's defaults) marked special; those it names
    besides, special where the vocabulary lacks them (transformers adds them) and as the file has them otherwise."""
    from tokenizers import AddedToken

    have = {t.content: t for t in tok.get_added_tokens_decoder().values()}
    named = set(named_specials(folder, extra=False, defaults=defaults))
    marks = []
    for s in named_specials(folder, defaults=defaults):
        t = have.get(s)
        if t is None or (not t.special and s in named):  # an extra one already there stays as it is
            marks.append(AddedToken(s, special=True, normalized=False) if t is None else
                         AddedToken(s, single_word=t.single_word, lstrip=t.lstrip, rstrip=t.rstrip,
                                    normalized=t.normalized, special=True))
    if marks:
        tok.add_special_tokens(marks)


def _bpe(**flags):
    """The class's ``BPE(vocab, merges, ...)``: tokenizers' defaults, then ``flags``."""
    base = dict(dropout=None, unk_token=None, continuing_subword_prefix=None, end_of_word_suffix=None,
                fuse_unk=False, byte_fallback=False, ignore_merges=False)
    return lambda model, cfg: model.update(base, **{k: v(cfg) if callable(v) else v for k, v in flags.items()})


_BYTES = _bpe(continuing_subword_prefix="", end_of_word_suffix="")
_MODEL = {
    "LlamaTokenizer": _bpe(fuse_unk=True, byte_fallback=True),
    "GemmaTokenizer": _bpe(fuse_unk=True, byte_fallback=True,
                           unk_token=lambda cfg: _str(cfg.get("unk_token", "<unk>")) or "None"),
    "Qwen2Tokenizer": _BYTES, "Qwen3_5Tokenizer": _BYTES, "GPTNeoXTokenizer": _BYTES, "CohereTokenizer": _BYTES,
    "GPT2Tokenizer": _BYTES,
}


def _llama(tok, cfg):
    from tokenizers import decoders, pre_tokenizers

    prefix = True if cfg.get("add_prefix_space") is None else bool(cfg.get("add_prefix_space"))
    scheme = ("always" if cfg.get("legacy", False) else "first") if prefix else "never"
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=False)
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1)] if prefix else []))


def _gemma(tok, cfg):
    from tokenizers import decoders, normalizers, pre_tokenizers

    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.normalizer = normalizers.Replace(" ", "\u2581")


def _qwen(pattern):
    def build(tok, cfg):
        from tokenizers import Regex, decoders, normalizers, pre_tokenizers

        tok.decoder = decoders.ByteLevel()
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=bool(cfg.get("add_prefix_space") or False), use_regex=False)])
    return build


def _byte_level(digits: bool = False, nfc: bool = True, decoder_prefix: bool = False, trim_option: bool = False):
    """GPTNeoXTokenizer (NFC, ByteLevel with the config's trim_offsets), CohereTokenizer (NFC, Digits, ByteLevel),
    GPT2Tokenizer (no normalizer, ByteLevel)."""
    def build(tok, cfg):
        from tokenizers import decoders, normalizers, pre_tokenizers

        prefix = bool(cfg.get("add_prefix_space", False))
        trim = bool(cfg.get("trim_offsets", True)) if trim_option else True
        tok.normalizer = normalizers.NFC() if nfc else None
        level = pre_tokenizers.ByteLevel(add_prefix_space=prefix, trim_offsets=trim)
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), level]) \
            if digits else level
        tok.decoder = decoders.ByteLevel(add_prefix_space=prefix, trim_offsets=True) if decoder_prefix \
            else decoders.ByteLevel()
    return build


_PARTS = {
    "LlamaTokenizer": _llama, "GemmaTokenizer": _gemma, "Qwen2Tokenizer": _qwen(QWEN2_PATTERN),
    "Qwen3_5Tokenizer": _qwen(QWEN3_5_PATTERN), "GPTNeoXTokenizer": _byte_level(trim_option=True),
    "CohereTokenizer": _byte_level(digits=True, decoder_prefix=True), "GPT2Tokenizer": _byte_level(nfc=False),
}
