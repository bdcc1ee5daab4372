"""Chat records: conversations (``messages``) and prompt/completion pairs, from any format that holds objects.

A record is a conversation when it has a ``messages`` field, a list of
``{"role", "content"}`` objects (the format of transformers and TRL; roles
system, user, assistant, tool), or ``prompt`` and ``completion`` fields
(TRL's prompt-completion format: two strings, which become one user turn
and one assistant turn, or two lists of messages, the completion's assistant
messages trained on). Field names are set by ``ChatFields``. What is not a
valid conversation is a ``Skip`` with its reason, like any bad record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

ROLES = ("system", "user", "assistant", "tool")

# Skip reasons of chat builds (merged into SKIP_REASONS).
CHAT_SKIP_REASONS = {
    "not_conversation": "a chat record whose messages (or prompt/completion) are not a valid conversation: "
                        "a list of objects with a known role and string content",
    "no_assistant": "a conversation with no assistant message to train on (with --train-on assistant)",
    "template_error": "the chat template raised an error on the conversation (raise_exception, a bad field)",
    "template_mismatch": "the chat template rewrites a message's content, so its tokens cannot be located exactly",
    "too_long": "a conversation longer than --seq-len (pass --truncate to keep its first seq_len tokens)",
}


@dataclass(frozen=True)
class ChatFields:
    """Where a record keeps its conversation; dots reach nested objects in jsonl."""

    messages: str = "messages"
    prompt: str = "prompt"
    completion: str = "completion"


class Conversation(NamedTuple):
    """One chat record: its messages, which of them are trained on, and where it was read (called only to name it)."""

    messages: list  # [{"role": str, "content": str, ...}], None-valued keys dropped (as transformers does)
    trained: list  # [bool] per message
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
        if m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            return None
        out.append(m)
    return out


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
        return msgs, [m["role"] == "assistant" for m in msgs]
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
    return p + c, [False] * len(p) + [m["role"] == "assistant" for m in c]


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
