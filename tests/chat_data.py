"""Conversations made from real text (the docstrings of Python's standard library), and test templates.

Deterministic (sorted files, a seeded generator): several turns, system
prompts on some, short and long assistant replies, odd whitespace and
words that also occur in the templates' headers. Used by tests/tokenize/chat/test_encode.py
and bench/chat_bench.py (at commit 99450b8).
"""

from __future__ import annotations

import ast
import functools
import os
import random
import re

STDLIB = os.path.dirname(os.__file__)


@functools.lru_cache(maxsize=2)
def paragraphs(limit: int = 20000) -> tuple[str, ...]:
    """Up to ``limit`` paragraphs of prose: the docstrings of the standard library's modules and functions."""
    out: list[str] = []
    for name in sorted(os.listdir(STDLIB)):
        if not name.endswith(".py"):
            continue
        try:
            with open(os.path.join(STDLIB, name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    out.extend(p.strip() for p in re.split(r"\n\s*\n", doc) if len(p.strip()) > 20)
        if len(out) >= limit:
            break
    return tuple(out[:limit])


SYSTEMS = ["You are a helpful assistant.", "Answer briefly.", "You are an expert Python programmer. Explain clearly.",
           "  Reply in plain English.  "]


def conversations(n: int, seed: int = 0, max_reply: int = 12, max_turns: int = 4) -> list[dict]:
    """``n`` records: mostly {"messages": [...]}, some {"prompt", "completion"} pairs (strings)."""
    rng = random.Random(seed)
    paras = paragraphs()
    out = []
    for i in range(n):
        if i % 10 == 9:
            out.append({"prompt": rng.choice(paras), "completion": " ".join(rng.sample(paras, rng.randint(1, 3)))})
            continue
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        for _ in range(rng.randint(1, max_turns)):
            q = rng.choice(paras)
            if rng.random() < 0.1:
                q = "\n " + q + " \n"  # whitespace a template may trim
            msgs.append({"role": "user", "content": q})
            k = rng.choice([1, 1, 2, 3, rng.randint(1, max_reply)])
            a = "\n\n".join(rng.sample(paras, k))
            if rng.random() < 0.05:
                a = rng.choice(["assistant", "user", "OK", "a", "\n"])  # short, and words of the headers
            msgs.append({"role": "assistant", "content": a})
        out.append({"messages": msgs})
    return out


# Templates with {% generation %} around what is trained on: transformers computes
# assistant_masks from these, independently of packer; packer gets the same
# template with the tags removed.
LLAMA3_GEN = (
    "{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}"
    "{% endgeneration %}{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
)

# Qwen-style ChatML: the last assistant turn gets an empty think block the template writes itself (trained,
# as TRL's Qwen3 training template trains it: it is what the model generates after the generation prompt).
CHATML_GEN = (
    "{% for message in messages %}"
    "{% if message.role == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{% if loop.last %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{{ message.content + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Mistral-style [INST]: the system prompt goes into the first user turn; replies end with </s>.
MISTRAL_GEN = (
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] + '\n\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set sys = '' %}{% set loop_messages = messages %}{% endif %}"
    "{{ bos_token }}{% for message in loop_messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + (sys if loop.first else '') + message['content'] + '[/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}"
    "{% else %}{{ raise_exception('roles must be user or assistant after the system prompt') }}{% endif %}"
    "{% endfor %}"
)


def plain(template: str) -> str:
    """``template`` without its generation tags."""
    return re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", template)


# Qwen3's template (its shape with tools=None, as packer renders it: thinking blocks after the last
# user query, reasoning split out of the content, tool calls written with no newline before
# <tool_call> when the content is empty, content.lstrip('\n')). QWEN3_GEN renders the same string
# with {% generation %} from after the assistant header through <|im_end|>.
_QWEN3 = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' and message.content is string and not("
    "message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.content is string %}{%- set content = message.content %}{%- else %}{%- set content = '' %}"
    "{%- endif %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning_content = message.reasoning_content %}"
    "{%- else %}{%- if '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}@GEN@"
    "{%- if loop.index0 > ns.last_query_index %}"
    "{%- if loop.last or (not loop.last and reasoning_content) %}"
    "{{- '<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}{{- content }}{%- endif %}"
    "{%- else %}{{- content }}{%- endif %}"
    "{%- if message.tool_calls %}{%- for tool_call in message.tool_calls %}"
    "{%- if (loop.first and content) or (not loop.first) %}{{- '\\n' }}{%- endif %}"
    "{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}"
    "{{- tool_call.arguments | tojson }}{%- endif %}{{- '}\\n</tool_call>' }}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>' }}@END@{{- '\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)


def _tagged(source: str) -> tuple[str, str]:
    """(the template, the same with {% generation %} where @GEN@ ... @END@ stand)."""
    return (source.replace("@GEN@", "").replace("@END@", ""),
            source.replace("@GEN@", "{%- generation %}").replace("@END@", "{%- endgeneration %}"))


QWEN3, QWEN3_GEN = _tagged(_QWEN3)

# Gemma 3's template (text content): the system prompt goes into the first user turn, roles must
# alternate, replies are trimmed and end with <end_of_turn>\n.
_GEMMA3 = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}{%- else -%}"
    "{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{%- if role == 'model' %}@GEN@{{ message['content'] | trim }}{{ '<end_of_turn>' }}@END@"
    "{%- else %}{{ message['content'] | trim }}{{ '<end_of_turn>' }}{%- endif %}{{ '\\n' }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}"
)
GEMMA3, GEMMA3_GEN = _tagged(_GEMMA3)


def tool_conversations(n: int, seed: int = 0) -> list[dict]:
    """``n`` conversations of the shapes tool-calling and reasoning data have: replies that only call
    tools (empty content), tool results, reasoning_content, <think> in the content, replies that start
    with a newline and indentation."""
    rng = random.Random(seed)
    paras = paragraphs()
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": rng.choice(paras)}]
        kind = i % 5
        if kind in (0, 1):
            calls = [{"type": "function", "function": {"name": rng.choice(["f", "search", "get_weather"]),
                                                       "arguments": {"q": rng.choice(paras)[:40]}}}
                     for _ in range(rng.randint(1, 2))]
            msgs.append({"role": "assistant", "content": "" if kind == 0 else rng.choice(paras), "tool_calls": calls})
            msgs.extend({"role": "tool", "content": '{"result": %d}' % rng.randint(0, 99)} for _ in calls)
            msgs.append({"role": "assistant", "content": rng.choice(paras)})
        elif kind == 2:
            msgs.append({"role": "assistant", "content": rng.choice(paras), "reasoning_content": rng.choice(paras)})
        elif kind == 3:
            msgs.append({"role": "assistant", "content": "<think>\n" + rng.choice(paras) + "\n</think>\n\n"
                         + rng.choice(paras)})
        else:
            msgs.append({"role": "assistant", "content": "\n    x = 1\n    " + rng.choice(paras)[:30]})
        if rng.random() < 0.3:
            msgs += [{"role": "user", "content": rng.choice(paras)}, {"role": "assistant", "content": rng.choice(paras)}]
        out.append({"messages": msgs})
    return out


# Small tokenizers of each class, trained here on the paragraphs (no files from outside the repo):
# name -> (special tokens, non-special added tokens, tokenizer_config.json without the template).
SMALL = {
    "qwen3": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
              {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "gemma3": (["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"], ["<mask>"],
               {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}),
    "llama3": (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], [],
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    # gpt-oss (o200k_harmony): its special tokens and tokenizer_config.json; o200k's split, no normalizer.
    "gptoss": (["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
                "<|end|>", "<|message|>", "<|call|>"], [],
               {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"}),
}

_SPLITS = {  # the pre-tokenizer's regex per class: Llama 3's (Qwen's is the same), o200k's (gpt-oss)
    "llama3": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "gptoss": (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
}


_TRAINED: dict[str, bytes] = {}  # name -> its tokenizer.json: each class trained once per run


def small_tokenizer(folder: str, name: str, template: str, extra: dict | None = None) -> str:
    """Write ``folder`` with a small tokenizer.json of class ``name`` (SMALL: byte-level BPE with an NFC
    normalizer for qwen3 and llama3, without one and o200k's split for gptoss, SentencePiece-style Metaspace BPE with byte fallback for gemma3) and
    a tokenizer_config.json holding ``template``; returns ``folder``. (Trained once per name and run, then copied.)"""
    import json

    os.makedirs(folder, exist_ok=True)
    if name not in _TRAINED:
        _TRAINED[name] = _train_small(name)
    with open(os.path.join(folder, "tokenizer.json"), "wb") as f:
        f.write(_TRAINED[name])
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({**SMALL[name][2], "chat_template": template, **(extra or {})}, f)
    return folder


def _train_small(name: str) -> bytes:
    """small_tokenizer's tokenizer.json of class ``name``, trained now."""
    import tempfile

    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials, added, _ = SMALL[name]
    texts = list(paragraphs(3000))
    if name == "gemma3":
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        tok.normalizer = normalizers.Replace(" ", "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_previous")
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
        alphabet = [f"<0x{i:02X}>" for i in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=specials + alphabet, show_progress=False)
    else:
        from tokenizers import Regex

        tok = Tokenizer(models.BPE())
        if name != "gptoss":
            tok.normalizer = normalizers.NFC()
        split = _SPLITS.get(name, _SPLITS["llama3"])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    with tempfile.TemporaryDirectory() as d:
        tok.save(os.path.join(d, "tokenizer.json"))  # (the bytes Tokenizer.save writes, as before)
        with open(os.path.join(d, "tokenizer.json"), "rb") as f:
            return f.read()


def trl_template(name: str) -> str | None:
    """The chat template TRL ships as ``trl/chat_templates/<name>.jinja`` (gptoss, gptoss_training,
    qwen3_training, ...), or None where TRL is not installed."""
    try:
        import trl
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(trl.__file__), "chat_templates", name + ".jinja")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()


def harmony_conversations(n: int, seed: int = 0) -> list[dict]:
    """``n`` conversations of the shapes gpt-oss's harmony template renders: ``tool_conversations``'
    shapes, and replies with ``thinking``, a tool call whose analysis is rendered (no final reply
    after it: the conversation ends with the tool's result), several tool-calling steps, a system
    prompt and several turns (replies closed by <|end|>, the last by <|return|>, calls by <|call|>)."""
    rng = random.Random(seed)
    paras = paragraphs()
    out = tool_conversations(n // 2, seed)

    def call():
        return [{"type": "function", "function": {"name": rng.choice(["search", "get_weather"]),
                                                  "arguments": {"q": rng.choice(paras)[:30]}}}]

    for i in range(n - len(out)):
        msgs = [{"role": "system", "content": rng.choice(SYSTEMS)}] if i % 2 else []
        msgs.append({"role": "user", "content": rng.choice(paras)})
        kind = i % 4
        if kind == 0:
            msgs += [{"role": "assistant", "content": rng.choice(paras)[:80], "tool_calls": call()},
                     {"role": "tool", "content": '{"temp": %d}' % rng.randint(0, 40)}]
        elif kind == 1:
            msgs += [{"role": "assistant", "content": rng.choice(paras), "thinking": rng.choice(paras)}]
        elif kind == 2:
            msgs += [{"role": "assistant", "thinking": rng.choice(paras)[:60], "tool_calls": call()},
                     {"role": "tool", "content": "[1, 2]"}, {"role": "assistant", "content": "", "tool_calls": call()},
                     {"role": "tool", "content": "ok"},
                     {"role": "assistant", "content": rng.choice(paras), "thinking": rng.choice(paras)[:60]}]
        else:
            for _ in range(rng.randint(2, 3)):
                msgs += [{"role": "assistant", "content": rng.choice(paras)}, {"role": "user", "content": rng.choice(paras)}]
            msgs.append({"role": "assistant", "content": rng.choice(paras)})
        out.append({"messages": msgs})
    return out


def chatml_tokenizer_folder(folder: str) -> str:
    """``folder`` (a copy of bench/families.py's small gpt2-like tokenizer: tests/conftest.copy_family) made a
    ChatML model folder: the template's two special tokens and ``CHATML_GEN``; returns it."""
    import json as _json

    from tokenizers import AddedToken, Tokenizer

    path = os.path.join(folder, "tokenizer.json")
    tok = Tokenizer.from_file(path)
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True), AddedToken("<|im_end|>", special=True)])
    tok.save(path)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        _json.dump({"chat_template": plain(CHATML_GEN), "eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}, f)
    return folder
