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

from array import array
from dataclasses import dataclass

import numpy as np

from ..formats import Part, Skip, parse_part, strict_error
from ..formats.chat import ChatFields, Conversation
from ..tokenize.chat import ChatError, ChatRenderer, ChatSpec, mask_from_offsets
from .plan import ChunkResult


@dataclass(frozen=True)
class ChatJob:
    """A chat build's settings, part of the Job."""

    spec: ChatSpec
    fields: ChatFields
    truncate: bool = False  # False: a conversation over seq_len is dropped and counted


_renderer: ChatRenderer | None = None
_tokenizer = None  # (fingerprint, tokenizers.Tokenizer)


def _get_renderer(spec: ChatSpec) -> ChatRenderer:
    global _renderer
    if _renderer is None or _renderer.spec != spec:
        _renderer = ChatRenderer(spec)
    return _renderer


def _get_tokenizer(info):
    """The HF tokenizer of ``info``: the chat path always uses HF, whose offsets map spans to tokens."""
    global _tokenizer
    if _tokenizer is None or _tokenizer[0] != info.fingerprint:
        from ..tokenize.tokenizer import loaded_hf

        tok = loaded_hf(info)
        _tokenizer = (info.fingerprint, tok)
    return _tokenizer[1]


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


def encode_chat_chunk(job, parts: list[Part]):
    """Render, tokenize and mask one chunk's conversations; returns a ``ChunkResult`` with ``mask`` set."""
    chat: ChatJob = job.chat
    renderer = _get_renderer(chat.spec)
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
            if chat.spec.train_on == "assistant" and not any(rec.trained):
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
    tok = _get_tokenizer(job.tokenizer)
    ids, masks = array("I"), []
    lengths: list[int] = []
    truncated = 0
    for enc, sp, where in zip(tok.encode_batch(texts, add_special_tokens=False) if texts else [], spans, wheres):
        n = len(enc.ids)
        if n > job.seq_len:
            if not chat.truncate:
                skip("too_long", where())
                continue
            truncated += 1
        m = _token_mask(enc, sp) if chat.spec.train_on == "assistant" else np.ones(n, np.uint8)
        keep = min(n, job.seq_len)
        ids.extend(enc.ids[:keep] if keep < n else enc.ids)
        masks.append(m[:keep])
        lengths.append(keep)
    tokens = np.frombuffer(ids, dtype=np.uint32) if len(ids) else np.zeros(0, np.uint32)
    mask = np.concatenate(masks) if masks else np.zeros(0, np.uint8)
    nbytes = sum(p.nbytes for p in parts)
    return ChunkResult(tokens.astype(job.dtype, copy=False), np.array(lengths, np.int64), tuple(skipped), nbytes,
                       mask=mask, truncated=truncated)
