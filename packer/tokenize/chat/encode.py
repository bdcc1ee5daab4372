"""The chat half of a work unit: conversations rendered, tokenized and masked on any core.

``encode_chat_chunk`` is ``encode_chunk`` for a chat build (``--chat``):
each conversation is rendered by its chat template (packer/tokenize/chat.py),
tokenized whole as transformers tokenizes the rendered string (HF
``tokenizers``, no special tokens added: the template writes BOS and the
end-of-turn tokens), and given a loss mask from its trained character
spans. A conversation is one document: longer than seq_len, it is dropped
(``too_long``) or, with ``--truncate``, cut to its first seq_len tokens and
counted; it is never split into pieces that attend separately.
"""

from __future__ import annotations

import functools
import json
from array import array
from dataclasses import dataclass, replace

import numpy as np

from ..errors import PackerError
from ..formats import Part, Skip, parse_part, strict_error
from ..formats.chat import ChatFields, Conversation
from ..tokenize.chat import ChatError, ChatRenderer, ChatSpec, mask_from_offsets
from ..tokenize.tokenizer import loaded_hf
from .plan import ChunkResult


@dataclass(frozen=True)
class ChatJob:
    """A chat build's settings, part of the Job."""

    spec: ChatSpec
    fields: ChatFields
    truncate: bool = False  # False: a conversation over seq_len is dropped and counted


def chat_job(o, tok):
    """(the tokenizer as a chat build uses it, the ChatJob): the template loaded and compiled once, in the
    main process. The pad id is the one a text build of this tokenizer pads with (its pad token, else
    the end-of-document token): a chat build appends no EOS, so the tokenizer was resolved without one."""
    from ..tokenize.chat import load_chat_template
    from ..tokenize.tokenizer import EOS_CANDIDATES, PAD_CANDIDATES

    if tok.kind != "hf":
        raise PackerError("--chat needs --tokenizer: a folder with tokenizer.json and a chat template")
    hf = loaded_hf(tok)
    added = hf.get_added_tokens_decoder().values()
    specials = [t.content for t in added if t.special]
    spec = load_chat_template(o.tokenizer, o.chat_template, specials, o.train_on)
    vocab = hf.get_vocab(with_added_tokens=True)
    pads = [*PAD_CANDIDATES, *(c for c in EOS_CANDIDATES if c in specials or c == "<|endoftext|>"),
            dict(spec.specials).get("eos_token"), *spec.end_tokens]
    pad = next((vocab[c] for c in pads if c in vocab), tok.pad_id)
    around = "nothing: the chat template writes BOS and the end-of-turn tokens"  # (the summary's "around text")
    fields = ChatFields(o.messages_field, o.prompt_field, o.completion_field)
    return replace(tok, pad_id=pad, added=around), ChatJob(spec, fields, o.truncate)


def resumed(chat: ChatJob, out) -> ChatJob:
    """``chat`` with the date its killed build recorded (``strftime_now`` templates), so a resumed build's
    conversations all carry one date; ``out``: the build's storage."""
    if not chat.spec.date:
        return chat
    try:
        old = json.loads(out.read("build.json"))["settings"]["chat"]["date"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return chat  # nothing recorded: the resume's own check of the settings says what differs
    if not isinstance(old, str) or old == chat.spec.date:
        return chat
    return replace(chat, spec=replace(chat.spec, date=old))


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


def encode_chat_chunk(job, parts: list[Part]):
    """Render, tokenize and mask one chunk's conversations; returns a ``ChunkResult`` with ``mask`` set."""
    chat: ChatJob = job.chat
    renderer = _renderer(chat.spec)
    texts: list[str] = []
    spans: list[list[tuple[int, int]]] = []
    wheres = []
    skipped: list[Skip] = []

    def skip(reason: str, where: str) -> None:
        rec = Skip(reason, where)
        if job.strict:
            raise strict_error(rec)
        skipped.append(rec)

    for part in parts:
        for rec in parse_part(part, chat.fields):
            if type(rec) is not Conversation:
                skip(rec.reason, rec.where)
                continue
            if chat.spec.train_on != "all" and not any(t and m["role"] == "assistant"
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
    tok = loaded_hf(job.tokenizer)  # HF always: its offsets map spans to tokens
    ids, masks = array("I"), []
    lengths: list[int] = []
    truncated = 0
    encs = _encodings(tok, texts, job.seq_len, _longest_token(job.tokenizer.fingerprint, tok)) if texts else []
    for enc, sp, where in zip(encs, spans, wheres):
        n = len(enc.ids)
        if n > job.seq_len:
            if not chat.truncate:
                skip("too_long", where())
                continue
            truncated += 1
        m = _token_mask(enc, sp) if chat.spec.train_on != "all" else np.ones(n, np.uint8)
        keep = min(n, job.seq_len)
        ids.extend(enc.ids[:keep] if keep < n else enc.ids)
        masks.append(m[:keep])
        lengths.append(keep)
    tokens = np.frombuffer(ids, dtype=np.uint32) if len(ids) else np.zeros(0, np.uint32)
    mask = np.concatenate(masks) if masks else np.zeros(0, np.uint8)
    nbytes = sum(p.nbytes for p in parts)
    return ChunkResult(tokens.astype(job.dtype, copy=False), np.array(lengths, np.int64), tuple(skipped), nbytes,
                       mask=mask, truncated=truncated)
