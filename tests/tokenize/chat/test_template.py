"""packer/tokenize/chat/template.py and sandbox.py: rendering equals transformers', spans equal the
{% generation %} spans transformers computes, the fingerprint is deterministic, hostile templates
and files end in a counted skip or one line, and signals still stop a render."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from packer import PackerError
from packer.formats.chat import ChatFields, conversation_of, dict_getter, paths
from packer.tokenize.chat import sandbox as chat_sandbox
from packer.tokenize.chat import ChatError, ChatRenderer, ChatSpec, load_chat_template
from tests.chat_data import (CHATML_GEN, GEMMA3_GEN, LLAMA3_GEN, MISTRAL_GEN, QWEN3_GEN, conversations, plain,
                             tool_conversations)
from tests.conftest import REPO

pytest.importorskip("jinja2")

SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}
END = {"qwen3": "<|im_end|>", "chatml": "<|im_end|>", "gemma3": "<end_of_turn>", "llama3": "<|eot_id|>",
       "mistral": "</s>"}
TEMPLATES = {"qwen3": QWEN3_GEN, "chatml": CHATML_GEN, "gemma3": GEMMA3_GEN, "llama3": LLAMA3_GEN,
             "mistral": MISTRAL_GEN}


def _records(name):
    recs = conversations(150, seed=4) + (tool_conversations(150, seed=4) if name in ("qwen3", "chatml") else [])
    if name in ("gemma3", "mistral"):  # user/assistant alternating after an optional system prompt
        recs = [r for r in recs if "messages" not in r or all(m["role"] != "tool" for m in r["messages"])]
    return recs


def _conv(rec):
    return conversation_of(dict_getter(rec, paths(ChatFields())), ChatFields())


def _renderer(template, end, generation=False, train_on="assistant"):
    return ChatRenderer(ChatSpec(template, tuple(SPECIALS.items()), (end,), train_on, generation=generation))


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_text_and_spans_equal_transformers(name):
    """The plain template's inferred spans are the tagged template's spans as transformers renders them."""
    from transformers.utils.chat_template_utils import render_jinja_template

    tagged = TEMPLATES[name]
    r = _renderer(plain(tagged), END[name])
    msgs, texts, spans = [], [], []
    for rec in _records(name):
        m, trained = _conv(rec)
        try:
            text, sp = r.render(m, trained)
        except ChatError as e:
            assert e.reason == "template_error" and name in ("gemma3", "mistral")  # roles out of order
            continue
        msgs.append(m)
        texts.append(text)
        spans.append(sp)
    assert len(msgs) > 100
    ref_texts, ref_spans = render_jinja_template(msgs, chat_template=tagged, return_assistant_tokens_mask=True,
                                                 **SPECIALS)
    assert texts == ref_texts
    assert spans == [[s for s in x if s[1] > s[0]] for x in ref_spans]
    exact = _renderer(plain(tagged), END[name])  # the skeleton's shortcut gives what the exact renders give
    exact._skeletons.reply_starts = lambda *a: None
    assert [exact.render(m, [True] * len(m))[1] for m in msgs] == spans
    g = _renderer(tagged, END[name], generation=True)  # and the tags themselves, read by packer
    assert [g.render(m, [True] * len(m))[1] for m in msgs[:50]] == spans[:50]


def test_fingerprint_is_the_same_under_every_hash_seed(tmp_path):
    """Issue 33.3: end-of-turn candidates of equal length; a set's order must not reach the fingerprint."""
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "{% if messages | length < 9 %}{{ raise_exception('short') }}{% endif %}"  # (no probe fits:
                          "{% for m in messages %}{{ m.content + '<|a|><|b|><|c|>' }}{% endfor %}"}))  # all 3 close)
    code = ("from packer.tokenize.chat import load_chat_template as L; "
            f"s = L({str(folder)!r}, None, ['<|b|>', '<|a|>', '<|c|>']); assert len(s.end_tokens) == 3; "
            "print(s.fingerprint())")
    got = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                          env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(4)}
    assert len(got) == 1


@pytest.mark.parametrize("template", [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ messages[0].content }}",
    "{{ 'x' * 10**10 }}",
    "{{ 'x' * 10**9 }}",
    "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "{{ messages | tojson(indent=10**10) }}",
    "{{ 'x' | center(10**10) }}",
    "{{ '%099999999999d' % 1 }}",
    "{{ '{:>99999999999}'.format(1) }}",
    "{% macro f(s) %}{{ f(s ~ s) }}{% endmacro %}{{ f('ab') }}",
    "{% for c in messages[0].content %}{% for d in messages[0].content %}{% endfor %}{% endfor %}",
    "{{ 3 ** 100000000 }}",
])
def test_hostile_templates_end_in_a_counted_skip(template, monkeypatch):
    """Issue 33.7: each is refused at its bound (time or size), as a skip of this conversation."""
    monkeypatch.setattr(chat_sandbox, "RENDER_SECONDS", 0.5)
    r = _renderer(template, "</s>")
    with pytest.raises(ChatError) as e:
        r.render([{"role": "user", "content": "y" * 5000}, {"role": "assistant", "content": "ok"}], [True, True])
    assert e.value.reason in ("template_limit", "template_error")


def test_a_template_that_never_finishes_stops_the_build(monkeypatch):
    """One runaway conversation is a skip; TIMEOUTS_IN_A_ROW of them with none rendered between: one line."""
    monkeypatch.setattr(chat_sandbox, "RENDER_SECONDS", 0.05)
    r = _renderer("{% if messages[0].content == 'spin' %}{% for i in range(100000) %}{% for j in range(100000) %}"
                  "{% endfor %}{% endfor %}{% endif %}{% for m in messages %}{{ m.content }}</s>{% endfor %}", "</s>")
    spin = [{"role": "user", "content": "spin"}, {"role": "assistant", "content": "x"}]
    ok = [{"role": "user", "content": "fine"}, {"role": "assistant", "content": "x"}]
    for _ in range(3):
        for _ in range(chat_sandbox.TIMEOUTS_IN_A_ROW - 1):
            with pytest.raises(ChatError, match="budget"):
                r.render(spin, [True, True])
        assert r.render(ok, [True, True]) == ("fine</s>x</s>", [(8, 13)])
    for _ in range(chat_sandbox.TIMEOUTS_IN_A_ROW - 1):
        with pytest.raises(ChatError):
            r.render(spin, [True, True])
    with pytest.raises(PackerError, match="in a row: it does not finish"):
        r.render(spin, [True, True])


def test_a_render_in_progress_still_serves_signals(tmp_path):
    """A template that never ends under a long budget: SIGTERM still ends the process at once."""
    code = ("import signal, sys; import packer.tokenize.chat.sandbox as s; s.RENDER_SECONDS = 3600\n"
            "from packer.tokenize.chat import ChatRenderer, ChatSpec\n"
            "r = ChatRenderer(ChatSpec('{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
            "{% endfor %}', (), ()))\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\nprint('go', flush=True)\n"
            "r.render_text([{'role': 'user', 'content': 'x'}])\n")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "go"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 7


def test_empty_and_deep_conversations_are_skips_not_tracebacks():
    """Issue 33.8: a template rendering '' for one conversation; a field nested 1,000 deep that it prints."""
    r = _renderer("{% if messages[0].content != 'quiet' %}{{ messages | tojson }}</s>{% endif %}", "</s>")
    with pytest.raises(ChatError) as e:
        r.render([{"role": "user", "content": "quiet"}, {"role": "assistant", "content": "x"}], [True, True])
    assert e.value.reason == "empty_render"
    deep: object = "leaf"
    for _ in range(1000):
        deep = {"k": deep}
    try:
        r.render([{"role": "user", "content": "a", "extra": deep}, {"role": "assistant", "content": "x"}], [True, True])
    except ChatError as e:
        assert e.reason in ("template_error", "template_limit")


def _folder(tmp_path, config) -> str:
    d = tmp_path / "tok"
    d.mkdir(exist_ok=True)
    (d / "tokenizer_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(d)


def test_unreadable_templates_and_configs_are_one_line(tmp_path):
    ok = _folder(tmp_path, {"chat_template": "{{ messages[0].content }}"})
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    bad = tmp_path / "latin1.jinja"
    bad.write_bytes(b"{{ '\xe9' }}")
    for path, match in (("/dev/zero", "not a regular file"), (str(fifo), "not a regular file"), (str(bad), "not UTF-8"),
                        (str(tmp_path / "none.jinja"), "No such file")):
        with pytest.raises(PackerError, match=match):
            load_chat_template(ok, path, [])
    for config, match in (("[1, 2]", "a JSON list, not an object"), ("[" * 100000 + "]" * 100000, "nested too deeply"),
                          ("{not json", "cannot read")):
        with pytest.raises(PackerError, match=match):
            load_chat_template(_folder(tmp_path, config), None, [])
    with pytest.raises(PackerError, match="does not compile"):
        load_chat_template(_folder(tmp_path, {"chat_template": "{% for %}"}), None, [])


def test_generation_tags_compile_and_dates_are_fixed(tmp_path):
    spec = load_chat_template(_folder(tmp_path, {"chat_template": QWEN3_GEN, "eos_token": "<|im_end|>"}), None,
                              ["<|im_end|>", "<|im_start|>"])
    assert spec.generation and spec.end_tokens == ("<|im_end|>",) and not spec.date
    dated = load_chat_template(_folder(tmp_path, {"chat_template": "{{ strftime_now('%d %b %Y') }}"}), None, [],
                               date="2024-07-26T10:00:00+00:00")
    assert dated.date == "2024-07-26T10:00:00+00:00"
    assert ChatRenderer(dated).render_text([{"role": "user", "content": "x"}]) == "26 Jul 2024"
    assert load_chat_template(_folder(tmp_path, {"chat_template": "{{ strftime_now('%Y') }}"}), None, []).date
