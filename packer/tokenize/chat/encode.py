"""Conversations rendered, tokenized and masked on any core: ``encode_conversations``.

Each conversation is rendered by its chat template (template.py), tokenized
whole as transformers tokenizes the rendered string (HF ``tokenizers``, no
special tokens added: the template writes BOS and the end-of-turn tokens),
and given a loss mask from its trained character spans. A conversation is one
document: longer than seq_len, it is dropped (``too_long``) or, with
``--truncate``, cut to its first seq_len tokens and counted; it is never split
into pieces that attend separately. ``chat_tokenizer`` (main process, once)
loads the template and gives the tokenizer as a chat build uses it.

Conversations are duck-typed (``packer.formats.chat.Conversation``: ``messages``,
``trained``, ``where()``): tokenize imports no other stage.
"""

from __future__ import annotations

import functools
from array import array
from dataclasses import dataclass, replace

import numpy as np

from ...errors import PackerError
from ..tokenizer import EOS_CANDIDATES, PAD_CANDIDATES, TokenizerInfo, loaded_hf
from .template import ChatError, ChatRenderer, ChatSpec, load_chat_template, mask_from_offsets


@dataclass(frozen=True)
class Encoded:
    """A batch of conversations, encoded: every kept conversation's ids back to back, in order."""

    tokens: np.ndarray  # (sum(lengths),) uint32
    lengths: np.ndarray  # (conversations kept,) int64
    mask: np.ndarray  # (sum(lengths),) uint8: 1 = trained
    truncated: int = 0  # conversations cut to seq_len (--truncate)


def chat_tokenizer(tok: TokenizerInfo, tokenizer: str | None, chat_template: str | None,
                   train_on: str) -> tuple[TokenizerInfo, ChatSpec]:
    """(the tokenizer as a chat build uses it, its ChatSpec): the template of ``tokenizer`` (the
    --tokenizer given) or the file ``chat_template``, loaded and compiled once, in the main process.
    The pad id is the one a text build of this tokenizer pads with (its pad token, else the
    end-of-document token): a chat build appends no EOS, so the tokenizer was resolved without one."""
    if tok.kind != "hf":
        raise PackerError("--chat needs --tokenizer: a folder with tokenizer.json and a chat template")
    hf = loaded_hf(tok)
    added = hf.get_added_tokens_decoder().values()
    specials = [t.content for t in added if t.special]
    spec = load_chat_template(tokenizer, chat_template, specials, train_on)
    vocab = hf.get_vocab(with_added_tokens=True)
    pads = [*PAD_CANDIDATES, *(c for c in EOS_CANDIDATES if c in specials or c == "<|endoftext|>"),
            dict(spec.specials).get("eos_token"), *spec.end_tokens]
    pad = next((vocab[c] for c in pads if c in vocab), tok.pad_id)
    around = "nothing: the chat template writes BOS and the end-of-turn tokens"  # (the summary's "around text")
    return replace(tok, pad_id=pad, added=around), spec


@functools.lru_cache(maxsize=2)
def _renderer(spec: ChatSpec) -> ChatRenderer:
    """The renderer of ``spec`` in this process (keyed by the spec: a process serving two builds keeps two)."""
    return ChatRenderer(spec)


@functools.lru_cache(maxsize=4)
def _longest_token(fingerprint: str, tok) -> int:
    """The most characters one token of ``tok`` stands for (its longest vocabulary string: byte-level
    strings hold a character per byte, so this bounds the characters of any token from above)."""
    return max([len(t) for t in tok.get_vocab(with_added_tokens=True)] or [1])


def _token_mask(enc, spans: list[tuple[int, int]]) -> np.ndarray:
    """(tokens,) uint8 loss mask of one encoding: tokens overlapping a trained span.

    One ``char_to_token`` per span end (the tokens from the one holding a
    span's first character to the one holding its last); where a span end
    lies in no token (offsets trimmed), the whole offsets table instead.
    """
    n = len(enc.ids)
    mask = np.zeros(n, np.uint8)
    for s, e in spans:
        a, b = enc.char_to_token(s), enc.char_to_token(e - 1)
        if a is None or b is None:
            return mask_from_offsets(np.array(enc.offsets, dtype=np.int64).reshape(-1, 2), spans)
        mask[a:b + 1] = 1
    return mask


def _head(tok, text: str, limit: int, seq_len: int):
    """The encoding of a long conversation's head, when its first tokens are certain to be the whole
    text's: more than ``seq_len`` tokens come before the last three pre-tokens of ``text[:limit]`` (the
    only ones a cut can change). Else the whole text's encoding. Memory: a 40 MB conversation is
    encoded as its first ``limit`` characters (docs/chat.md, Bounds)."""
    enc = tok.encode(text[:limit], add_special_tokens=False)
    words = enc.word_ids
    last = next((w for w in reversed(words) if w is not None), None)
    if last is not None:
        safe = next((k for k, w in enumerate(words) if w is not None and w >= last - 2), len(words))
        if safe > seq_len:
            return enc
    return tok.encode(text, add_special_tokens=False)


def _encodings(tok, texts: list[str], seq_len: int, longest: int) -> list:
    """The encodings of ``texts`` (one batch); one longer than any ``seq_len`` tokens can span is
    encoded as its head alone (``_head``)."""
    limit = 2 * (seq_len + 64) * longest + 4096
    short = [i for i, t in enumerate(texts) if len(t) <= limit]
    out: list = [None] * len(texts)
    for i, enc in zip(short, tok.encode_batch([texts[i] for i in short], add_special_tokens=False) if short else []):
        out[i] = enc
    for i, t in enumerate(texts):
        if out[i] is None:
            out[i] = _head(tok, t, limit, seq_len)
    return out


def encode_conversations(info: TokenizerInfo, spec: ChatSpec, conversations, seq_len: int, truncate: bool,
                         skip) -> Encoded:
    """Render, tokenize and mask ``conversations`` (an iterable, read once, in order) with the
    template of ``spec`` and the HF tokenizer of ``info``. A conversation that cannot be built is
    passed to ``skip(reason, where)`` (which may raise: ``--strict``) as it is met: ``no_assistant``
    (nothing to train), the template's reasons (``ChatError``), ``too_long`` (over ``seq_len``
    tokens, without ``truncate``)."""
    renderer = _renderer(spec)
    texts: list[str] = []
    spans: list[list[tuple[int, int]]] = []
    wheres = []
    for rec in conversations:
        if spec.train_on != "all" and not any(t and m["role"] == "assistant"
                                              for t, m in zip(rec.trained, rec.messages)):
            skip("no_assistant", rec.where())
            continue
        try:
            text, sp = renderer.render(rec.messages, rec.trained)
        except ChatError as e:
            skip(e.reason, rec.where())
            continue
        texts.append(text)
        spans.append(sp)
        wheres.append(rec.where)
    tok = loaded_hf(info)  # HF always: its offsets map spans to tokens
    ids, masks = array("I"), []
    lengths: list[int] = []
    truncated = 0
    encs = _encodings(tok, texts, seq_len, _longest_token(info.fingerprint, tok)) if texts else []
    for enc, sp, where in zip(encs, spans, wheres):
        n = len(enc.ids)
        if n > seq_len:
            if not truncate:
                skip("too_long", where())
                continue
            truncated += 1
        m = _token_mask(enc, sp) if spec.train_on != "all" else np.ones(n, np.uint8)
        keep = min(n, seq_len)
        ids.extend(enc.ids[:keep] if keep < n else enc.ids)
        masks.append(m[:keep])
        lengths.append(keep)
    tokens = np.frombuffer(ids, dtype=np.uint32) if len(ids) else np.zeros(0, np.uint32)
    mask = np.concatenate(masks) if masks else np.zeros(0, np.uint8)
    return Encoded(tokens, np.array(lengths, np.int64), mask, truncated)
