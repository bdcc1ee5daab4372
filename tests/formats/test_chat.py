"""packer/formats/chat.py: what a chat record is: a ``messages`` list, or prompt/completion (strings or
lists of messages); messages as transformers gives them to a template; anything else a skip reason."""

from __future__ import annotations

import pytest

from packer.formats.base import SKIP_REASONS
from packer.formats.chat import CHAT_SKIP_REASONS, ChatFields, conversation_of, dict_getter, paths


def conv(rec: dict, fields: ChatFields = ChatFields()):
    return conversation_of(dict_getter(rec, paths(fields)), fields)


def test_a_messages_record_is_trained_whole_with_null_keys_dropped_and_reasoning_aliased():
    msgs = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},  # content blocks
            {"role": "assistant", "content": None, "tool_calls": [{"name": "f"}], "name": None},  # a tool call only
            {"role": "tool", "content": "42"},
            {"role": "assistant", "content": "done", "reasoning": "think"}]
    got, trained = conv({"messages": msgs, "prompt": "ignored"})
    assert trained == [True] * 5
    assert got[2] == {"role": "assistant", "tool_calls": [{"name": "f"}]}
    assert got[4] == {"thinking": "think", "role": "assistant", "content": "done", "reasoning": "think",
                      "reasoning_content": "think"}
    assert got[:2] == msgs[:2] and got[3] == msgs[3]
    assert msgs[2]["name"] is None  # the record itself is not changed


@pytest.mark.parametrize("messages", [
    [], "hello", [{"role": "user", "content": "x"}, "not an object"], [{"role": "robot", "content": "x"}],
    [{"content": "no role"}], [{"role": "user", "content": 7}], [{"role": "user", "content": ["not a block"]}],
])
def test_what_is_not_a_list_of_messages_is_not_a_conversation(messages):
    assert conv({"messages": messages}) == "not_conversation"


def test_prompt_and_completion_become_turns_with_only_the_completion_trained():
    assert conv({"prompt": "q", "completion": "a"}) == (
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], [False, True])
    p = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    c = [{"role": "assistant", "content": "a"}]
    assert conv({"prompt": p, "completion": c}) == (p + c, [False, False, True])
    assert conv({"prompt": "q", "completion": ""}) == "empty"
    assert conv({"prompt": "q"}) == "missing_field" and conv({"text": "x"}) == "missing_field"
    assert conv({"prompt": "q", "completion": c}) == "not_conversation"  # a string and a list
    assert conv({"prompt": p, "completion": [{"role": "user", "content": 1}]}) == "not_conversation"


def test_field_names_are_dotted_paths_into_nested_objects():
    fields = ChatFields(messages="chat.turns", prompt="io.q", completion="io.a")
    assert paths(fields) == {"chat.turns": ("chat", "turns"), "io.q": ("io", "q"), "io.a": ("io", "a")}
    assert conv({"io": {"q": "x", "a": "y"}}, fields)[1] == [False, True]
    assert conv({"chat": {"turns": [{"role": "user", "content": "x"}]}}, fields)[1] == [True]
    assert conv({"chat": "flat", "io": {"q": "x"}}, fields) == "missing_field"  # chat.turns not reached


def test_every_chat_skip_reason_is_described_beside_the_others():
    assert set(CHAT_SKIP_REASONS) <= set(SKIP_REASONS) and all(SKIP_REASONS[k] for k in CHAT_SKIP_REASONS)
