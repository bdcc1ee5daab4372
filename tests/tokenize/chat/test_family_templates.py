"""Chat on each family's own template (issue 40): the real Qwen3, Gemma 3 and DeepSeek V3 folders
(~/.cache/packer-test-tokenizers, $PACKER_TEST_TOKENIZERS; skipped when absent), and gpt-oss twice: a
faithful small copy (its special tokens, tokenizer_config.json and o200k split) and the real folder
(``fetch-tokenizers DIR gptoss``: its tokenizer.json and tokenizer_config.json, which carries no template;
the model's chat_template.jinja beside them is OpenAI's harmony template, taken as TRL ships it). Per
conversation with tool calls and reasoning:

- ids equal transformers' ``apply_chat_template(tokenize=True)``, and none is skipped that transformers renders;
- the mask is docs/chat.md's rule, checked against TRL's training template of the family (its
  ``{% generation %}`` spans, computed by transformers) less exactly the difference docs/chat.md states
  ("Against TRL"): the header TRL trains (DeepSeek V3, gpt-oss) or the newline after the end-of-turn
  token (Qwen3, Gemma 3); and on every conversation, no user, system or tool text is trained and each
  trained run ends with an end-of-turn token.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from packer.formats.chat import ChatFields, conversation_of, dict_getter, paths
from packer.tokenize import resolve_tokenizer
from packer.tokenize.chat import ChatError, chat_tokenizer, encode_conversations, mask_from_offsets
from tests.chat_data import conversations, harmony_conversations, small_tokenizer, tool_conversations, trl_template
from tests.conftest import one_check_sample

transformers = pytest.importorskip("transformers")
REAL = os.environ.get("PACKER_TEST_TOKENIZERS") or os.path.expanduser("~/.cache/packer-test-tokenizers")

# family -> (TRL's training template, the end-of-turn tokens, what TRL trains beyond packer per span:
# ("head", text) a span's first characters, ("tail", text) its last)
FAMILIES = {
    "qwen3": ("qwen3_training", {"<|im_end|>"}, ("tail", "\n")),
    "gemma3": ("gemma3_training", {"<end_of_turn>"}, ("tail", "\n")),
    "deepseek_v3": ("deepseekv3_training", {"<｜end▁of▁sentence｜>"}, ("head", "<｜Assistant｜>")),
    "gptoss": ("gptoss_training", {"<|end|>", "<|call|>", "<|return|>"}, ("head", "<|start|>assistant")),
}
FAMILIES["gptoss_real"] = FAMILIES["gptoss"]
GPTOSS = ["gptoss", "gptoss_real"]  # the faithful copy, the real folder
# Issue 54: the default run checks 2 of the present families' templates (a seeded rotation, conftest.rotation,
# Gemma 3 last): with the seed below DeepSeek V3 (TRL trains the header: "head") and Qwen3 (the newline after
# the end of turn: "tail"), both of docs/chat.md's differences; the others are marked full (-m full). gpt-oss
# keeps its own two tests below on both folders.
WHERE = {"gptoss_real": os.path.join(REAL, "gptoss", "tokenizer.json")}  # (what _folder needs; the copy is built)
PRESENT = sorted(n for n in FAMILIES
                 if n == "gptoss" or os.path.exists(WHERE.get(n) or os.path.join(REAL, n, "tokenizer_config.json")))
# (tests/conftest.py marks the rest full; the gpt-oss tests take their two folders in every run)
in_full_sweep = one_check_sample(PRESENT, "test_each_family_ids_equal_transformers_and_mask_follows_the_rule",
                                 "family-templates")


@pytest.fixture(scope="module")
def gptoss_copy(tmp_path_factory):
    template = trl_template("gptoss")
    if template is None:
        pytest.skip("TRL (its chat_templates/gptoss.jinja) not installed")
    return small_tokenizer(str(tmp_path_factory.mktemp("gptoss") / "gptoss"), "gptoss", template)


@pytest.fixture(scope="module")
def gptoss_real(tmp_path_factory):
    """The real gpt-oss folder as the model ships it: the fetched tokenizer.json and tokenizer_config.json,
    and chat_template.jinja (the harmony template; the fetched package leaves it out)."""
    fetched, template = os.path.join(REAL, "gptoss"), trl_template("gptoss")
    if not os.path.exists(os.path.join(fetched, "tokenizer.json")):
        pytest.skip(f"{fetched} not present (../shared/tools/fetch-tokenizers DIR gptoss fetches it)")
    if template is None:
        pytest.skip("TRL (its chat_templates/gptoss.jinja) not installed")
    folder = tmp_path_factory.mktemp("gptoss_real")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(fetched, f), folder / f)
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    return str(folder)


def _folder(name, gptoss_copy_request):
    if name == "gptoss":
        return gptoss_copy_request.getfixturevalue("gptoss_copy")
    if name == "gptoss_real":
        return gptoss_copy_request.getfixturevalue("gptoss_real")
    folder = os.path.join(REAL, name)
    if not os.path.exists(os.path.join(folder, "tokenizer_config.json")):
        pytest.skip(f"{folder} not present (../shared/tools/fetch-tokenizers fetches it)")
    return folder


def _records(name):
    if name.startswith("gptoss"):
        return harmony_conversations(160, seed=7)
    return tool_conversations(120, seed=7) + conversations(60, seed=7)


def _convs(records):
    fields = ChatFields()
    return [conversation_of(dict_getter(r, paths(fields)), fields) for r in records]


class _Conv:
    def __init__(self, msgs, trained, where):
        self.messages, self.trained, self.where = msgs, trained, lambda: where


def _trl_spans(name, tk, msgs, text):
    """TRL's generation spans for ``msgs``, less what docs/chat.md says TRL trains beyond packer; None
    where TRL's training template renders another text (Qwen3's puts a think block in every reply)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    trl, _, (side, extra) = FAMILIES[name]
    template = trl_template(trl)
    if template is None:
        pytest.skip("TRL not installed")
    specials = {k: str(getattr(tk, k)) for k in ("bos_token", "eos_token") if getattr(tk, k, None)}
    try:
        (t,), (spans,) = render_jinja_template([msgs], chat_template=template, return_assistant_tokens_mask=True,
                                               **specials)
    except Exception:
        return None
    if t != text:
        return None
    out = []
    for s, e in spans:
        if side == "head" and text.startswith(extra, s):
            s += len(extra)
        if side == "tail" and text.endswith(extra, s, e):
            e -= len(extra)
        out.append((s, e))
    return out


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_ids_equal_transformers_and_mask_follows_the_rule(name, request):
    folder = _folder(name, request)
    tk = transformers.AutoTokenizer.from_pretrained(folder)
    info, spec = chat_tokenizer(resolve_tokenizer(folder, eos=False, bos=False), folder, None, "assistant")
    assert FAMILIES[name][1] <= set(spec.end_tokens)  # every end-of-turn token the template writes
    convs = [_Conv(m, t, i) for i, (m, t) in enumerate(_convs(_records(name)))]
    skipped = []
    got = encode_conversations(info, spec, iter(convs), 1 << 16, False, lambda r, w: skipped.append((w, r)))
    renders = []
    for c in convs:
        try:
            renders.append(tk.apply_chat_template(c.messages, tokenize=False))
        except Exception:
            renders.append(None)
    assert [w for w, _ in skipped] == [i for i, r in enumerate(renders) if r is None]  # 0 skipped that it renders
    kept = [i for i, r in enumerate(renders) if r is not None]
    assert len(kept) >= 0.5 * len(convs)
    bounds = np.concatenate([[0], np.cumsum(got.lengths)])
    compared = 0
    for k, i in enumerate(kept):
        ids, mask = got.tokens[bounds[k]:bounds[k + 1]], got.mask[bounds[k]:bounds[k + 1]]
        text = renders[i]
        enc = tk(text, add_special_tokens=False, return_offsets_mapping=True)
        assert list(ids) == list(tk.apply_chat_template(convs[i].messages, tokenize=True, return_dict=True)["input_ids"])
        assert list(ids) == list(enc["input_ids"])
        _check_rule(tk, spec, convs[i].messages, ids, mask)
        ref = _trl_spans(name, tk, convs[i].messages, text)
        if ref is not None:
            np.testing.assert_array_equal(mask, mask_from_offsets(np.array(enc["offset_mapping"]), ref))
            compared += 1
    assert compared >= 0.3 * len(kept)


def _check_rule(tk, spec, msgs, ids, mask):
    """No user, system or tool text trained; each trained run ends with an end-of-turn token."""
    assert mask.any()
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
    runs = [tk.decode(ids[a:b]) for a, b in zip(edges[::2], edges[1::2])]
    for run in runs:
        assert any(run.endswith(t) for t in spec.end_tokens), run[-60:]
    trained = "".join(runs)
    for m in msgs:
        c = m.get("content")
        if m["role"] != "assistant" and isinstance(c, str) and len(c) > 12:
            assert c.strip()[:40] not in trained


@pytest.mark.parametrize("name", GPTOSS)
def test_gptoss_trains_no_user_system_or_tool_token(name, request):
    """Issue 40: a reply closed by <|end|>, a tool call closed by <|call|>, each trained through its own end
    token, not through to the final <|return|> (old: 1 end token, <|return|>)."""
    folder = _folder(name, request)
    tk = transformers.AutoTokenizer.from_pretrained(folder)
    info, spec = chat_tokenizer(resolve_tokenizer(folder, eos=False, bos=False), folder, None, "assistant")
    msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny."},
            {"role": "user", "content": "And tomorrow?"}, {"role": "assistant", "content": "Rain.", "thinking": "Guess."}]
    got = encode_conversations(info, spec, iter([_Conv(msgs, [True] * len(msgs), "x")]), 4096, False,
                               lambda r, w: pytest.fail(r))
    edges = np.flatnonzero(np.diff(np.concatenate([[0], got.mask, [0]])))
    runs = [tk.decode(got.tokens[a:b]) for a, b in zip(edges[::2], edges[1::2])]
    assert runs == [" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
                    "<|channel|>final<|message|>Sunny.<|end|>",
                    "<|channel|>analysis<|message|>Guess.<|end|><|start|>assistant<|channel|>final<|message|>Rain."
                    "<|return|>"]


@pytest.mark.parametrize("name", GPTOSS)
def test_prompt_completion_under_generation_tags_trains_the_completion(name, request, tmp_path):
    """Issue 40: TRL's gptoss_training / deepseekv3_training open {% generation %} before the generation
    prompt ends; a prompt/completion record trained nothing (old). Now its completion, as the same turns
    as a messages record train it."""
    folder = _folder(name, request)
    template = trl_template("gptoss_training")
    tpl = tmp_path / "gen.jinja"
    tpl.write_text(template)
    info, spec = chat_tokenizer(resolve_tokenizer(folder, eos=False, bos=False), folder, str(tpl), "assistant")
    assert spec.generation
    prompt = [{"role": "user", "content": "Capital of France?"}]
    reply = [{"role": "assistant", "content": "Paris."}]
    as_pc = _Conv(prompt + reply, [False, True], "pc")
    as_msgs = _Conv(prompt + reply, [True, True], "m")
    got = encode_conversations(info, spec, iter([as_pc, as_msgs]), 4096, False, lambda r, w: pytest.fail(r))
    n = int(got.lengths[0])
    assert got.mask[:n].sum() > 0 and np.array_equal(got.mask[:n], got.mask[n:])
    tk = transformers.AutoTokenizer.from_pretrained(folder)
    assert tk.decode(got.tokens[:n][got.mask[:n] == 1]) == "<|start|>assistant<|channel|>final<|message|>Paris.<|return|>"


def test_a_reply_with_no_end_token_after_it_is_trained_through_its_content_alone(tmp_path):
    """A template that writes <|eot_id|> only between messages: each reply is trained from after its header
    (old: from the user's <|eot_id|>, taking it and the header); the last, with no end-of-turn token after
    it, through its content (docs/chat.md); one that renders nothing there is template_mismatch."""
    from tests.tokenize.chat.test_template import _renderer

    tpl = ("{% for m in messages %}{% if not loop.first %}<|eot_id|>{% endif %}"
           "<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}{% endfor %}"
           "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
    r = _renderer(tpl, "<|eot_id|>")
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"}, {"role": "assistant", "content": "ciao"}]
    text, spans = r.render(msgs, [True] * 4)
    assert [text[a:b] for a, b in spans] == ["hello<|eot_id|>", "ciao"]
    with pytest.raises(ChatError) as e:
        r.render(msgs[:3] + [{"role": "assistant", "content": ""}], [True] * 4)
    assert e.value.reason == "template_mismatch"


def figures(gptoss_folder: str, gptoss_real: str | None = None) -> None:
    """Print docs/chat.md's "Against TRL" table: per family, the tokens TRL's training template trains
    beyond packer's default, on this module's conversations that both render alike."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from packer.tokenize.chat import ChatRenderer

    for name in sorted(FAMILIES):
        folder = {"gptoss": gptoss_folder, "gptoss_real": gptoss_real or ""}.get(name, os.path.join(REAL, name))
        if not os.path.exists(os.path.join(folder, "tokenizer_config.json")):
            print(f"{name}: {folder} not present")
            continue
        tk = transformers.AutoTokenizer.from_pretrained(folder)
        _, spec = chat_tokenizer(resolve_tokenizer(folder, eos=False, bos=False), folder, None, "assistant")
        r, template = ChatRenderer(spec), trl_template(FAMILIES[name][0])
        specials = {k: str(getattr(tk, k)) for k in ("bos_token", "eos_token") if getattr(tk, k, None)}
        n = rendered = more = spans = trained = 0
        for m, t in _convs(_records(name)):
            try:
                text, sp = r.render(m, t)
                (t2,), (sp2,) = render_jinja_template([m], chat_template=template, return_assistant_tokens_mask=True,
                                                      **specials)
            except Exception:
                continue
            rendered += 1
            if t2 != text:
                continue
            off = np.array(tk(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"])
            ours, trl = mask_from_offsets(off, sp), mask_from_offsets(off, [s for s in sp2 if s[1] > s[0]])
            assert not (ours & ~trl).any()
            n, more, spans, trained = n + 1, more + int((trl != ours).sum()), spans + len(sp2), trained + int(trl.sum())
        print(f"{name}: {n} of {rendered} conversations render alike; {spans} assistant spans; TRL trains {more} tokens "
              f"more: {more / max(n, 1):.2f} per conversation, {more / max(spans, 1):.2f} per span, "
              f"{100 * more / max(trained, 1):.1f}% of its trained tokens")


if __name__ == "__main__":  # PYTHONPATH=. python -m tests.tokenize.chat.test_family_templates
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        real = os.path.join(d, "gptoss_real")
        if os.path.exists(os.path.join(REAL, "gptoss", "tokenizer.json")):
            os.makedirs(real)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                os.symlink(os.path.join(REAL, "gptoss", f), os.path.join(real, f))
            with open(os.path.join(real, "chat_template.jinja"), "w", encoding="utf-8") as f:
                f.write(trl_template("gptoss"))
        figures(small_tokenizer(os.path.join(d, "gptoss"), "gptoss", trl_template("gptoss")), real)
