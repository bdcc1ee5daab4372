"""Conversations made from real text (the docstrings of Python's standard library), and test templates.

Deterministic (sorted files, a seeded generator): several turns, system
prompts on some, short and long assistant replies, odd whitespace and
words that also occur in the templates' headers. Used by tests/pipeline/test_chat.py
and bench/chat_bench.py.
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

# Qwen-style ChatML: the last assistant turn gets an empty think block the template writes itself.
CHATML_GEN = (
    "{% for message in messages %}"
    "{% if message.role == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% if loop.last %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% generation %}{{ message.content + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
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
