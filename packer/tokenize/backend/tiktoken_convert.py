"""Can tiktoken express this tokenizer.json? ``convert`` reads its model, pre-tokenizer, normalizer
and post-processor and builds tiktoken's ranks and pattern, or raises ``NotExpressible`` naming why;
the tokens the merge conditions cannot vouch for are returned as suspects for the id check."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

# HF's ByteLevel(use_regex=True) pattern: the same string as tiktoken's gpt2/r50k.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

_NOOP_POST = {"ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing"}  # add nothing without special tokens


_AS_TIKTOKEN = {("Isolated", False), ("Removed", True)}  # Split forms that cut text as tiktoken does (_pattern)


class NotExpressible(Exception):
    """The tokenizer.json cannot be run by tiktoken with HF's ids; ``str(e)`` says why (one line)."""


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the printable char that stands for each byte -> the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def readable(tok: str) -> str:
    """A byte-level token ('Ġthe') as the text it stands for (' the'), repr'd; bytes that are not
    whole UTF-8 characters shown as \\x escapes."""
    try:
        raw = tok.translate(_to_bytes_table()).encode("latin-1")
    except UnicodeEncodeError:
        return repr(tok)
    return repr(raw.decode("utf-8", "backslashreplace"))


@lru_cache(maxsize=1)
def _to_bytes_table() -> dict:
    """str.translate table: byte-level symbol -> the char whose latin-1 code is that byte."""
    return str.maketrans({c: chr(b) for c, b in byte_decoder().items()})


@dataclass(frozen=True)
class Conversion:
    """What a ``tiktoken.Encoding`` is built from, plus what stays with HF."""

    pat_str: str  # the split regex
    ranks: dict  # bytes -> token id, every token HF's BPE can produce
    added: tuple[str, ...]  # literal strings HF cuts out of the text: such a text is encoded by HF
    vocab_size: int  # ids are < vocab_size
    note: str  # how it was derived, for the manifest
    normalize: str | None = None  # "NFC" | "NFKC": applied to the text first, as HF's normalizer does
    suspects: tuple[str, ...] = ()  # tokens (as text) where the merge conditions fail: checked by ids (``suspect_strings``)


def _pattern(pre: dict | None) -> str:
    """The one regex that cuts text into pieces as ``pre`` does, or NotExpressible."""
    if pre is None:
        raise NotExpressible("no pre-tokenizer (tiktoken needs a split pattern)")
    kind = pre.get("type")
    if kind == "ByteLevel":
        if pre.get("add_prefix_space"):
            raise NotExpressible("ByteLevel pre-tokenizer adds a prefix space")
        if not pre.get("use_regex", True):
            raise NotExpressible("ByteLevel pre-tokenizer without a split pattern (whole text as one piece)")
        return GPT2_PATTERN
    if kind == "Sequence":
        steps = pre.get("pretokenizers") or []
        if len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel":
            split, bl = steps
            if bl.get("add_prefix_space") or bl.get("use_regex", True):
                raise NotExpressible("Split followed by a ByteLevel that splits again or adds a prefix space")
            pat = split.get("pattern") or {}
            if "Regex" not in pat:
                raise NotExpressible("Split on a plain string, not a regex")
            # tiktoken keeps the regex's matches as pieces and drops the text between them. HF's
            # Removed + invert says exactly that (the matches become the pieces, the gaps are
            # removed: GPT-3.5's cl100k tokenizer.json); Isolated keeps the gaps as pieces too, the
            # same wherever the pattern covers all text (its \s+ branch does), which the id check decides.
            if (split.get("behavior"), bool(split.get("invert"))) not in _AS_TIKTOKEN:
                raise NotExpressible(f"Split behaviour {split.get('behavior')}/invert={split.get('invert')} "
                                     "(only Isolated, or Removed with invert)")
            return pat["Regex"]
        if len(steps) == 1:
            return _pattern(steps[0])
        raise NotExpressible("pre-tokenizer sequence " + "+".join(str(s.get("type")) for s in steps))
    raise NotExpressible(f"pre-tokenizer {kind}")


def _noop_normalizer(norm: dict | None) -> bool:
    if norm is None:
        return True
    return norm.get("type") == "Sequence" and all(_noop_normalizer(n) for n in norm.get("normalizers") or [])


_FORMS = ("NFC", "NFKC")  # normalizers Python's unicodedata applies exactly as HF does (checked by ids, as all else)


def _normal_form(norm: dict | None) -> str | None:
    """None for no normalizer, "NFC"/"NFKC" for one of those alone (or in a Sequence of one);
    else NotExpressible (a normalizer tiktoken cannot apply first)."""
    if _noop_normalizer(norm):
        return None
    if norm.get("type") in _FORMS:
        return norm["type"]
    if norm.get("type") == "Sequence":
        steps = [n for n in norm.get("normalizers") or [] if not _noop_normalizer(n)]
        if len(steps) == 1 and steps[0].get("type") in _FORMS:
            return steps[0]["type"]
    raise NotExpressible(f"normalizer {norm.get('type')} changes the text in a way tiktoken cannot apply first")


def _noop_post(post: dict | None) -> bool:
    if post is None:
        return True
    if post.get("type") == "Sequence":
        return all(_noop_post(p) for p in post.get("processors") or [])
    return post.get("type") in _NOOP_POST


def convert(tokenizer_json: str, check_merges: bool = True, hf=None) -> Conversion:
    """Derive a tiktoken encoding from an HF tokenizer.json, or raise ``NotExpressible``.

    ``check_merges=False`` skips condition (b) of the module docstring (HF
    encodes every token once, ~0.2 s per 50k tokens): for a worker rebuilding
    a conversion the main process already checked. ``hf``: the loaded HF
    tokenizer, if at hand (saves loading it again).
    Longer than 60 lines: the tokenizer.json components checked one after the other, each refusal one line.
    """
    try:
        d = json.loads(tokenizer_json)
    except ValueError as e:
        raise NotExpressible(f"not JSON ({e})") from None
    model = d.get("model") or {}
    if model.get("type") != "BPE":
        raise NotExpressible(f"model {model.get('type')}, not BPE")
    if model.get("dropout") not in (None, 0, 0.0):
        raise NotExpressible(f"BPE dropout {model['dropout']} (random merges)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise NotExpressible(f"BPE {key} {model[key]!r}")
    if model.get("byte_fallback"):
        raise NotExpressible("BPE byte_fallback (a SentencePiece-style vocabulary)")
    form = _normal_form(d.get("normalizer"))
    if not _noop_post(d.get("post_processor")):
        raise NotExpressible(f"post-processor {d['post_processor'].get('type')}")
    pat = _pattern(d.get("pre_tokenizer"))

    vocab: dict[str, int] = model.get("vocab") or {}
    b2 = byte_decoder()
    if any(c not in vocab for c in b2):
        raise NotExpressible("vocabulary lacks some of the 256 byte-level symbols (not a byte-level BPE)")
    if len(set(vocab.values())) != len(vocab):
        raise NotExpressible("vocabulary maps two tokens to one id")
    added = d.get("added_tokens") or []
    added_str = {a["content"] for a in added if a.get("content")}

    # Merges: every result's id should be no lower than the previous result's
    # (merge order = id order; a token may have several merges). Where that, or
    # condition (b), fails, the proof does not hold for that token: it becomes a
    # suspect, and the ids on strings built around it decide (``choose``).
    made_by: set[str] = set()
    suspects: list[str] = []
    last, last_tok = -1, ""
    for i, m in enumerate(model.get("merges") or []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        t = a + b
        if a not in vocab or b not in vocab or t not in vocab:
            raise NotExpressible(f"merge {i} ({a!r} {b!r}) names a token outside the vocabulary")
        r = vocab[t]
        if r < last:  # both sides of the inversion
            suspects += [t, last_tok]
        elif r > last:
            last, last_tok = r, t
        made_by.add(t)

    ranks: dict[bytes, int] = {}
    to_bytes = _to_bytes_table()
    for tok, i in vocab.items():
        if len(tok) == 1 or tok in made_by:
            try:
                ranks[tok.translate(to_bytes).encode("latin-1")] = i
            except UnicodeEncodeError:
                raise NotExpressible(f"token {tok!r} is not byte-level") from None
        elif model.get("ignore_merges") and tok not in added_str:
            # HF returns such a token for a piece that equals it, and tiktoken
            # would also build it out of two neighbours: refuse.
            raise NotExpressible(f"token {readable(tok)} (id {i}) is made by no merge while ignore_merges is on")
        # else: HF's merges never produce it, so tiktoken must not know it either

    if check_merges:
        own = hf.model if hf is not None and not model.get("ignore_merges") else None
        suspects += _tokens_merges_do_not_rebuild(d, [t for t in vocab if len(t) > 1 and t in made_by], own)

    vocab_size = max(max(vocab.values()), max((a["id"] for a in added), default=0)) + 1
    n_merges = len(model.get("merges") or [])
    note = (f"{'GPT-2 pattern' if pat == GPT2_PATTERN else 'Split pattern'}{', ' + form + ' first' if form else ''}, "
            f"{len(ranks)} ranks, {n_merges} merges"
            + (f", {len(set(suspects))} tokens outside the merge conditions checked by ids" if suspects else " in id order"))
    text_suspects = tuple(sorted({t.translate(to_bytes).encode("latin-1").decode("utf-8", "ignore") for t in suspects} - {""}))
    return Conversion(pat, ranks, tuple(sorted(added_str)), vocab_size, note, form, text_suspects)


def _merge_only_model_json(d: dict) -> str:
    """The tokenizer.json reduced to its BPE model, merges only (no whole-word shortcut)."""
    model = dict(d["model"])
    model["ignore_merges"] = False
    model["dropout"] = None
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                       "pre_tokenizer": None, "model": model, "post_processor": None, "decoder": None})


def _tokens_merges_do_not_rebuild(d: dict, tokens: list[str], model=None) -> list[str]:
    """Condition (b): the tokens whose bytes HF's merges alone do not turn into that token.
    ``model``: the tokenizer's own BPE model if it has no whole-word lookup."""
    if model is None:
        from tokenizers import Tokenizer

        model = Tokenizer.from_str(_merge_only_model_json(d)).model
    vocab = d["model"]["vocab"]
    out = []
    for t in tokens:  # already in byte-level symbols: straight to the BPE model, as one word
        got = model.tokenize(t)
        if len(got) != 1 or got[0].id != vocab[t]:
            out.append(t)
    return out
