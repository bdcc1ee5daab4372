"""The chat half of a work unit: a chunk's conversations, parsed and handed to packer.tokenize.chat.

``encode_chat_chunk`` is ``encode_chunk`` for a chat build (``--chat``): it
parses the chunk's records (packer/formats/chat.py), counts the ones that are
not conversations, and makes one call, ``encode_conversations``, which
renders, tokenizes and masks the rest (packer/tokenize/chat/encode.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from ..formats import Part, Skip, parse_part, strict_error
from ..formats import ChatFields, Conversation
from ..tokenize.chat import ChatSpec, chat_tokenizer, encode_conversations
from .plan import ChunkResult


@dataclass(frozen=True)
class ChatJob:
    """A chat build's settings, part of the Job."""

    spec: ChatSpec
    fields: ChatFields
    truncate: bool = False  # False: a conversation over seq_len is dropped and counted


def chat_job(o, tok):
    """(the tokenizer as a chat build uses it, the ChatJob) of output settings ``o``: the template
    loaded and compiled once, in the main process (``chat_tokenizer``)."""
    tok, spec = chat_tokenizer(tok, o.tokenizer, o.chat_template, o.train_on)
    fields = ChatFields(o.messages_field, o.prompt_field, o.completion_field)
    return tok, ChatJob(spec, fields, o.truncate)


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


def encode_chat_chunk(job, parts: list[Part]) -> ChunkResult:
    """Render, tokenize and mask one chunk's conversations; returns a ``ChunkResult`` with ``mask`` set.
    Skips are counted in the order their records come (a ``--strict`` build stops at the first)."""
    chat: ChatJob = job.chat
    skipped: list[Skip] = []

    def skip(reason: str, where: str) -> None:
        rec = Skip(reason, where)
        if job.strict:
            raise strict_error(rec)
        skipped.append(rec)

    def conversations():
        for part in parts:
            for rec in parse_part(part, chat.fields):
                if type(rec) is Conversation:
                    yield rec
                else:
                    skip(rec.reason, rec.where)

    got = encode_conversations(job.tokenizer, chat.spec, conversations(), job.seq_len, chat.truncate, skip)
    nbytes = sum(p.nbytes for p in parts)
    return ChunkResult(got.tokens.astype(job.dtype, copy=False), got.lengths, tuple(skipped), nbytes,
                       mask=got.mask, truncated=got.truncated)
