"""Chat records: conversations (``messages``) and prompt/completion pairs, from any format that holds objects.

A record is a conversation when it has a ``messages`` field, a list of
``{"role", "content"}`` objects (the format of transformers and TRL; roles
system, user, assistant, tool), or ``prompt`` and ``completion`` fields
(TRL's prompt-completion format: two strings, which become one user turn
and one assistant turn, or two lists of messages, the completion's assistant
messages trained on). Field names are set by ``ChatFields``. What is not a
valid conversation is a ``Skip`` with its reason, like any bad record.

Messages are given to the template as transformers gives them: keys whose
value is null dropped, and reasoning under any of its names
(``reasoning_content``, ``thinking``, ``reasoning``) also under
``reasoning_content`` and ``thinking``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

ROLES = ("system", "user", "assistant", "tool")

# Skip reasons of chat builds (merged into SKIP_REASONS).
CHAT_SKIP_REASONS = {
    "not_conversation": "a chat record whose messages (or prompt/completion) are not a valid conversation: "
                        "a list of objects with a known role and a string content (or none, or content blocks)",
    "no_assistant": "a conversation with no assistant message to train on (with --train-on assistant or assistant+tool)",
    "template_error": "the chat template raised an error on the conversation (raise_exception, a bad field)",
    "template_limit": "the chat template ran over its time or size budget on the conversation (docs/chat.md, Bounds)",
    "empty_render": "the chat template rendered nothing for the conversation",
    "template_not_prefix": "the chat template renders the turns before a reply differently once the reply follows, "
                           "so where the reply starts cannot be located exactly",
    "template_mismatch": "no end-of-turn token after a trained message, so where it ends cannot be located exactly",
    "too_long": "a conversation longer than --seq-len (pass --truncate to keep its first seq_len tokens)",
}


@dataclass(frozen=True)
class ChatFields:
    """Where a record keeps its conversation; dots reach nested objects in jsonl."""

    messages: str = "messages"
    prompt: str = "prompt"
    completion: str = "completion"


class Conversation(NamedTuple):
    """One chat record: its messages, which of them may be trained on, and where it was read (called only to name it)."""

    messages: list  # [{"role": str, "content": str, ...}], None-valued keys dropped (as transformers does)
    trained: list  # [bool] per message: in the part that is trained (a completion; all of a messages record)
    where: Callable[[], str]


def _messages(value) -> list | None:
    """``value`` as a list of messages, or None if it is not one."""
    if not isinstance(value, list) or not value:
        return None
    out = []
    for m in value:
        if not isinstance(m, dict):
            return None
        m = {k: v for k, v in m.items() if v is not None}
        if m.get("role") not in ROLES or not _content_ok(m.get("content", "")):
            return None
        reasoning = next((m[k] for k in _REASONING if k in m), None)
        if reasoning is not None:  # transformers' aliasing: templates read either name
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


_REASONING = ("reasoning_content", "thinking", "reasoning")


def _content_ok(c) -> bool:
    """A message's content as transformers takes it: a string, absent or null (a reply that only calls
    tools), or a list of content blocks (objects: ``{"type": "text", "text": ...}``)."""
    return isinstance(c, str) or (isinstance(c, list) and all(isinstance(b, dict) for b in c))


_MISSING = object()


def conversation_of(get, fields: ChatFields) -> tuple[list, list] | str:
    """(messages, trained) of a record, or the skip reason.

    ``get(name)`` returns the record's field ``name`` or ``_MISSING``.
    """
    raw = get(fields.messages)
    if raw is not _MISSING:
        msgs = _messages(raw)
        if msgs is None:
            return "not_conversation"
        return msgs, [True] * len(msgs)
    prompt, completion = get(fields.prompt), get(fields.completion)
    if prompt is _MISSING or completion is _MISSING:
        return "missing_field"
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion:
            return "empty"
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}], [False, True]
    p, c = _messages(prompt), _messages(completion)
    if p is None or c is None:
        return "not_conversation"
    return p + c, [False] * len(p) + [True] * len(c)


def dict_getter(obj, path_of: dict):
    """``get`` for ``conversation_of`` over a parsed JSON object; ``path_of`` maps a name to its dotted path."""
    def get(name):
        cur = obj
        for key in path_of[name]:
            if not isinstance(cur, dict) or key not in cur:
                return _MISSING
            cur = cur[key]
        return cur
    return get


def paths(fields: ChatFields) -> dict:
    return {f: tuple(f.split(".")) for f in (fields.messages, fields.prompt, fields.completion)}
