"""Cut long texts where the tokenizer provably starts afresh.

Why: HF ``tokenizers`` holds an ``Encoding`` per text while it encodes
(ids, token strings, offsets, masks: 200-250 bytes per token). One 9 MB
document (there is one in the benchmark corpus) costs 0.7 GB in each worker
that meets it, and allocating and faulting that much costs about 7% of the
build's CPU. Encoding such a text in pieces of ``PIECE_CHARS`` characters,
``BATCH_CHARS`` at a time, bounds both, if the pieces' ids, concatenated,
are exactly the whole text's ids.

Where that holds: just before a ``"\\n"`` that follows an ASCII letter or
digit. Every pre-tokenizer regex in use (GPT-2's, cl100k/Llama-3's, o200k's,
Qwen2's) has no alternative that matches a letter or digit and then a
newline, and none looks behind, so a pre-token ends there and the matching
after it depends only on the text after it. BPE, WordPiece and WordLevel
models then encode each pre-token on its own. ``cut_rule`` says whether a
given tokenizer is of that kind (normalizer, pre-tokenizer, model and
added tokens, checked by type), then tries the cut on probe strings built to
break it; any doubt and packer encodes whole texts, as before.
"""

from __future__ import annotations

import json

import numpy as np

PIECE_CHARS = 32 << 10  # a cut is looked for from half this on
BATCH_CHARS = 256 << 10  # characters per encode call when pieces are in play
# tiktoken and fastokens hold about 1-2 bytes per character of what one call encodes, besides the ids
# (measured on a 50 MB text: +55 and +111 MB); a text over LONG_CHARS goes to them in pieces of about
# LONG_PIECE_CHARS, and the byte tokenizer makes a longer text's UTF-8 that many characters at a time.
LONG_CHARS = 4 << 20
LONG_PIECE_CHARS = 1 << 20

_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD"}
_PRE_TOKENIZERS = {"ByteLevel", "Split", "Digits", "Whitespace", "WhitespaceSplit", "Punctuation"}
_MODELS = {"BPE", "WordPiece", "WordLevel"}


def _ok_cut(text: str, p: int) -> bool:
    c = text[p - 1]
    return c.isascii() and c.isalnum()


def cut(text: str, piece_chars: int = PIECE_CHARS) -> list[str]:
    """``text`` as consecutive pieces of about ``piece_chars`` characters or
    fewer, each after the first starting at a ``"\\n"`` that follows an ASCII
    letter or digit. A stretch with no such place stays whole."""
    at = cut_at(text, piece_chars)
    return [text[a:b] for a, b in zip(at, at[1:])]


def cut_at(text: str, piece_chars: int = PIECE_CHARS) -> list[int]:
    """Where ``cut`` cuts ``text``: 0, each piece's start after the first, then ``len(text)``."""
    if len(text) <= piece_chars:
        return [0, len(text)]
    at, start, half = [0], 0, piece_chars // 2
    while len(text) - start > piece_chars:
        p = text.find("\n", start + half)
        while p != -1 and not _ok_cut(text, p):
            p = text.find("\n", p + 1)
        if p == -1:
            break
        at.append(p)
        start = p
    return at + [len(text)]


def cut_batches(texts: list[str], at: list[list[int]], batch_chars: int = BATCH_CHARS):
    """The pieces of ``texts`` (``at[i]``: ``cut_at(texts[i])``), in order, in runs of at most
    ``batch_chars`` characters (a longer piece alone), each piece sliced only as its run is made: a
    long text is never held twice over (a str of one emoji is 4 bytes a character)."""
    cur, n = [], 0
    for t, bounds in zip(texts, at):
        for a, b in zip(bounds, bounds[1:]):
            if cur and n + b - a > batch_chars:
                yield cur
                cur, n = [], 0
            cur.append(t[a:b])
            n += b - a
    if cur:
        yield cur


def _types(node: dict | None, key: str) -> list[dict]:
    """The node and, for a Sequence, its members (one level)."""
    if node is None:
        return []
    if node.get("type") == "Sequence":
        return list(node.get(key, []))
    return [node]


def _state(component) -> dict | None:
    """A tokenizer component's own JSON (a few hundred bytes; the whole file is MBs)."""
    return None if component is None else json.loads(component.__getstate__())


def _why_not_structurally(tok) -> str | None:
    for n in _types(_state(tok.normalizer), "normalizers"):
        if n.get("type") not in _NORMALIZERS:
            return f"normalizer {n.get('type')}"
    pres = _types(_state(tok.pre_tokenizer), "pretokenizers")
    if not pres:
        return "no pre-tokenizer"
    for p in pres:
        if p.get("type") not in _PRE_TOKENIZERS:
            return f"pre-tokenizer {p.get('type')}"
        if p.get("type") == "ByteLevel" and p.get("add_prefix_space"):
            return "ByteLevel add_prefix_space"
    model = type(tok.model).__name__
    if model not in _MODELS:
        return f"model {model}"
    if getattr(tok.model, "dropout", None):
        return "BPE dropout"
    for t in tok.get_added_tokens_decoder().values():
        if "\n" in t.content or t.rstrip or t.lstrip:
            return f"added token {t.content!r}"
    return None


def _probes() -> list[str]:
    """Strings with a cut place in every context a regex could treat apart."""
    befores = ["", " ", "x", "  ", "'", ".", "\t", "é", "中", "\n"]
    cores = ["a", "Z", "0", "9", "ab", "12345", "s", "t", "don't", "I'm"]
    afters = ["\n", "\nb", "\n\n", "\n x", "\n  y", "\n\t}", "\n123", "\n'", "\n.", "\n é", "\n\r\n", "\n中"]
    return [b + c + a for b in befores for c in cores for a in afters]


def cut_rule(tok) -> str | None:
    """None if texts may be cut for ``tok`` (a ``tokenizers.Tokenizer``), else
    why not, in a few words."""
    try:
        why = _why_not_structurally(tok)
    except Exception as e:  # a component we cannot read: doubt, so whole texts
        return f"unreadable tokenizer component ({type(e).__name__})"
    if why:
        return why
    probes = _probes()
    cuts = [(i, p) for i, s in enumerate(probes) for p in range(1, len(s)) if s[p] == "\n" and _ok_cut(s, p)]
    for i, p in cuts:  # the pre-tokenizer itself must end a pre-token there...
        if p not in {end for _, (_, end) in tok.pre_tokenizer.pre_tokenize_str(probes[i])}:
            return f"pre-tokenizer joins across {probes[i]!r}[{p}]"
    wholes = tok.encode_batch(probes, add_special_tokens=False)  # ...and the ids must agree
    halves = tok.encode_batch([h for i, p in cuts for h in (probes[i][:p], probes[i][p:])], add_special_tokens=False)
    for k, (i, p) in enumerate(cuts):
        if halves[2 * k].ids + halves[2 * k + 1].ids != wholes[i].ids:
            return f"probe {probes[i]!r} cut at {p}"
    return None


RULE_VERSION = "1"  # bump when cut_rule's checks or probes change: records of the old answer are then not read


def recorded_cut_rule(fingerprint: str, split_special: bool, load_hf) -> str | None:
    """``cut_rule`` of the tokenizer that ``load_hf()`` returns, read back from this machine's record of checks
    (backend/check_cache.py) where an earlier build recorded it, else worked out and recorded. tiktoken and
    fastokens encode without the HF tokenizer, and parsing it for this answer alone cost each worker that met
    a long text 2.8 s on Gemma 3's 31 MB tokenizer.json. Keyed by the tokenizer's fingerprint, the
    split-special setting, the tokenizers version and ``RULE_VERSION``."""
    import hashlib

    import tokenizers

    from .backend import check_cache

    where = check_cache.folder("backend-checks")
    key = repr((RULE_VERSION, fingerprint, bool(split_special), tokenizers.__version__)).encode()
    name = f"cut-{hashlib.sha256(key).hexdigest()[:32]}.json"
    got = check_cache.read_json(where, name)
    if isinstance(got, dict) and "why_not" in got and (got["why_not"] is None or isinstance(got["why_not"], str)):
        return got["why_not"]
    why = cut_rule(load_hf())
    check_cache.write_json(where, name, {"why_not": why})
    return why


def batches(pieces: list[str], batch_chars: int = BATCH_CHARS) -> list[list[str]]:
    """``pieces`` in order, in runs of at most ``batch_chars`` characters (a
    longer piece alone)."""
    out, cur, n = [], [], 0
    for s in pieces:
        if cur and n + len(s) > batch_chars:
            out.append(cur)
            cur, n = [], 0
        cur.append(s)
        n += len(s)
    if cur:
        out.append(cur)
    return out


def bytes_flat(texts: list[str], eos: np.ndarray, dtype="uint32") -> tuple[np.ndarray, np.ndarray]:
    """The byte tokenizer's ``Encoder.encode_flat``: each text's UTF-8 bytes, then ``eos`` (0 or 1
    id), in ``dtype``. A text over ``LONG_CHARS`` is encoded ``LONG_PIECE_CHARS`` at a time straight
    into the result: neither its UTF-8 nor a wider copy of its ids is ever whole in memory."""
    extra = len(eos)
    if any(len(t) > LONG_CHARS for t in texts):
        lengths = np.fromiter((_utf8_len(t) + extra for t in texts), dtype=np.int64, count=len(texts))
        out, at = np.empty(int(lengths.sum()), dtype=dtype), 0
        for t in texts:
            for k in range(0, len(t), LONG_PIECE_CHARS):
                b = np.frombuffer(t[k:k + LONG_PIECE_CHARS].encode("utf-8", "surrogatepass"), dtype=np.uint8)
                out[at:at + len(b)] = b
                at += len(b)
            out[at:at + extra] = eos
            at += extra
        return out, lengths
    raw = [t.encode("utf-8", "surrogatepass") for t in texts]
    lengths = np.fromiter((len(b) + extra for b in raw), dtype=np.int64, count=len(raw))
    data = np.frombuffer(b"".join(raw), dtype=np.uint8)
    if not extra:
        return data.astype(dtype), lengths
    out = np.empty(int(lengths.sum()), dtype=dtype)
    ends = np.cumsum(lengths) - 1  # where each text's EOS goes
    is_text = np.ones(len(out), dtype=bool)
    is_text[ends] = False
    out[is_text] = data
    out[ends] = eos[0]
    return out, lengths


def _utf8_len(t: str) -> int:
    if t.isascii():  # (a flag of the str: no pass over it)
        return len(t)
    return sum(len(t[k:k + LONG_PIECE_CHARS].encode("utf-8", "surrogatepass")) for k in range(0, len(t), LONG_PIECE_CHARS))


def flat_in_pieces(texts: list[str], encode_flat, pre: tuple[int, ...], post: tuple[int, ...],
                   dtype="uint32") -> tuple[np.ndarray, np.ndarray]:
    """``encode_flat(texts, post, pre)`` (tiktoken's or fastokens': uint32 ids, lengths) in ``dtype``, with
    each text over ``LONG_CHARS`` encoded as its ``cut`` pieces of about ``LONG_PIECE_CHARS``, one call
    each: the same ids (where ``cut_rule`` allows cuts), the encoder's own memory that of one piece."""
    out, lengths, i = [], np.zeros(len(texts), dtype=np.int64), 0
    while i < len(texts):
        j = i
        while j < len(texts) and len(texts[j]) <= LONG_CHARS:
            j += 1
        if j > i:  # a run of ordinary texts: one call, as always
            ids, lengths[i:j] = encode_flat(texts[i:j], post, pre)
            out.append(ids.astype(dtype, copy=False))
            i = j
            continue
        n = len(pre) + len(post)
        out.append(np.array(pre, dtype=dtype))
        at = cut_at(texts[i], LONG_PIECE_CHARS)
        for a, b in zip(at, at[1:]):  # (sliced one at a time: the pieces are never all held)
            ids = encode_flat([texts[i][a:b]], None, ())[0].astype(dtype, copy=False)
            out.append(ids)
            n += len(ids)
        out.append(np.array(post, dtype=dtype))
        lengths[i], i = n, i + 1
    return (np.concatenate(out) if out else np.zeros(0, dtype)), lengths
