"""Chat templates: a conversation rendered as transformers renders it, tokenized, with a loss mask.

``load_chat_template`` (main process, once) finds the template (the
tokenizer's tokenizer_config.json or chat_template.jinja, or a file given
with ``--chat-template``) and the special tokens it reads; ``ChatRenderer``
(one per worker) renders conversations with the same sandboxed jinja2
environment as transformers' ``apply_chat_template`` (``trim_blocks``,
``lstrip_blocks``, ``loopcontrols``, ``raise_exception``, ``strftime_now``,
the JSON ``tojson``, ``bos_token``/``eos_token``/... from the config), and
finds the character spans to train on.

How the spans are found exactly (docs/chat.md): the conversation is rendered
a second time with each message's content replaced by a unique marker. The
text between markers is what the template writes on its own (headers,
end-of-turn tokens, an empty ``<think></think>`` block, a trailing
generation prompt); the real rendering must be exactly that text with each
content (or the content trimmed, as templates often do) in between. That is
checked, character for character: where it does not hold (a template that
rewrites content, e.g. splits a reasoning block out of it) the conversation
is refused (``ChatError``), never guessed at. A span is an assistant
message's content as rendered, plus the special token the template writes
right after it (``<|eot_id|>``, ``<|im_end|>``, ``</s>``). ``mask_from_offsets``
turns spans into a per-token mask the way transformers turns
``{% generation %}`` spans into ``assistant_masks``: a token is trained when
its character range overlaps a span.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from ..errors import PackerError

ROLES = ("system", "user", "assistant", "tool")
TRAIN_ON = ("assistant", "all")
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ChatError(ValueError):
    """A conversation that cannot be rendered or mapped; ``reason`` is a skip reason."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.reason = reason


@dataclass(frozen=True)
class ChatSpec:
    """What a worker needs to render conversations; picklable, recorded in the manifest by fingerprint."""

    template: str  # the jinja2 source
    specials: tuple[tuple[str, str], ...]  # (name, token) passed to the template: bos_token, eos_token, ...
    end_tokens: tuple[str, ...]  # special tokens that may close an assistant turn, longest first
    train_on: str = "assistant"  # "assistant" | "all"
    source: str = ""  # where the template came from, for messages

    def fingerprint(self) -> str:
        import hashlib

        blob = json.dumps([self.template, list(self.specials), list(self.end_tokens), self.train_on])
        return hashlib.sha256(blob.encode()).hexdigest()


def _token_text(v) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or a dict with ``content``."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def load_chat_template(tokenizer: str | None, template_file: str | None, special_tokens: list[str],
                       train_on: str = "assistant") -> ChatSpec:
    """The chat template for ``tokenizer`` (a folder or tokenizer.json path), or from ``template_file``.

    ``special_tokens`` are the tokenizer's special added tokens (the
    candidates for an end-of-turn token). Raises ``PackerError`` in one line
    when there is no template, or it does not compile.
    """
    if train_on not in TRAIN_ON:
        raise PackerError(f"unknown --train-on {train_on!r}: choose from {', '.join(TRAIN_ON)}")
    if tokenizer is None:
        raise PackerError("--chat needs --tokenizer: a folder with tokenizer.json and tokenizer_config.json")
    folder = tokenizer if os.path.isdir(tokenizer) else os.path.dirname(os.path.abspath(tokenizer))
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    cfg: dict = {}
    if os.path.isfile(cfg_path):
        try:
            with open(cfg_path, encoding="utf-8") as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise PackerError(f"cannot read {cfg_path}: {e}") from None
    template, source = None, ""
    if template_file is not None:
        try:
            with open(template_file, encoding="utf-8") as f:
                template, source = f.read(), template_file
        except OSError as e:
            raise PackerError(f"cannot read --chat-template {template_file}: {e.strerror or e}") from None
    else:
        t = cfg.get("chat_template")
        if isinstance(t, list):  # named templates: transformers uses "default"
            t = next((x.get("template") for x in t if isinstance(x, dict) and x.get("name") == "default"), None)
        jinja_file = os.path.join(folder, "chat_template.jinja")
        if isinstance(t, str):
            template, source = t, cfg_path
        elif os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                template, source = f.read(), jinja_file
    if template is None:
        raise PackerError(f"no chat template for {tokenizer}: none in {cfg_path} or chat_template.jinja; "
                          "pass --chat-template FILE")
    specials = tuple((k, s) for k in _SPECIAL_KEYS if (s := _token_text(cfg.get(k))) is not None)
    # End-of-turn candidates: the special tokens the template can write (named in its source, or
    # passed to it as eos_token and kin); Llama 3 has 256 reserved specials no template writes.
    written = {t for t in special_tokens if t in template} | {s for _, s in specials if s in special_tokens}
    spec = ChatSpec(template, specials, tuple(sorted(written, key=len, reverse=True)), train_on, source)
    try:
        import jinja2  # noqa: F401
    except ImportError:
        raise PackerError("--chat needs jinja2 to render chat templates: pip install 'packer[chat]'") from None
    try:
        compile_template(template)
    except Exception as e:
        raise PackerError(f"chat template from {source} does not compile: {e}") from None
    return spec


def compile_template(source: str):
    """A compiled template, in the environment transformers' ``apply_chat_template`` uses."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Jinja's own tojson escapes HTML characters; transformers' does not.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def _marker(i: int) -> str:
    # Private-use characters: no template trims or matches them, no real text holds them.
    return f"\ue000{i}\ue001"


class ChatRenderer:
    """Renders conversations and finds their trained character spans (one per process)."""

    def __init__(self, spec: ChatSpec):
        self.spec = spec
        self._tpl = compile_template(spec.template)
        self._kw = dict(spec.specials)
        self._close = re.compile("|".join(map(re.escape, spec.end_tokens))) if spec.end_tokens else None
        self._skeletons: dict = {}  # conversation shape -> marker rendering (see _skeleton)

    def render_text(self, messages: list[dict]) -> str:
        """The rendered string, as ``apply_chat_template(messages, tokenize=False)`` gives it."""
        import jinja2

        try:
            return self._tpl.render(messages=messages, tools=None, documents=None, add_generation_prompt=False,
                                    **self._kw)
        except jinja2.exceptions.TemplateError as e:
            raise ChatError("template_error", str(e)) from None
        except Exception as e:  # a template failing on odd input (a type error in jinja): the record's fault
            raise ChatError("template_error", f"{type(e).__name__}: {e}") from None

    def render(self, messages: list[dict], trained: list[bool]) -> tuple[str, list[tuple[int, int]]]:
        """(rendered text, trained spans): spans are [start, end) character offsets, in order.

        ``trained[i]``: message i's content is trained on (an assistant
        message; in prompt/completion records, one of the completion's).
        """
        text = self.render_text(messages)
        if self.spec.train_on == "all":
            return text, [(0, len(text))]
        if not any(trained):
            return text, []
        try:
            return text, self._spans(text, self._skeleton(messages, cached=True), messages, trained)
        except ChatError:  # a skeleton of another conversation of this shape may not fit this one
            return text, self._spans(text, self._skeleton(messages, cached=False), messages, trained)

    def _skeleton(self, messages: list[dict], cached: bool) -> str:
        """The rendering with every content replaced by its marker. Conversations of one shape
        (roles and every other field) mostly share it, so it is kept by shape; a kept one is only a
        guess that ``_spans`` checks character for character, and rendered afresh if it fails."""
        key = tuple((m["role"], tuple(sorted((k, repr(v)) for k, v in m.items() if k != "content")))
                    for m in messages)
        if cached and key in self._skeletons:
            return self._skeletons[key]
        skeleton = self.render_text([{**m, "content": _marker(i)} for i, m in enumerate(messages)])
        if len(self._skeletons) >= 4096:
            self._skeletons.clear()
        self._skeletons[key] = skeleton
        return skeleton

    def _spans(self, text: str, skeleton: str, messages: list[dict], trained: list[bool]) -> list[tuple[int, int]]:
        """The trained spans of ``text``, given its skeleton; ``ChatError`` if the text is not the
        skeleton with the contents put in."""
        # Where each marker stands in the skeleton: the template's own text lies between them.
        found = []
        for i in range(len(messages)):
            at = skeleton.find(_marker(i))
            if at >= 0:
                found.append((at, i))
        found.sort()
        spans = []
        pos, sk = 0, 0  # where we are in the text and in the skeleton
        for at, i in found:
            between = skeleton[sk:at]
            if not text.startswith(between, pos):
                raise ChatError("template_mismatch")
            pos += len(between)
            sk = at + len(_marker(i))
            nxt = skeleton[sk:self._next_marker(skeleton, sk)]
            c = messages[i]["content"]
            for cand in (c, c.strip(), c.rstrip(), c.lstrip()):
                if text.startswith(cand, pos) and text.startswith(nxt, pos + len(cand)):
                    break
            else:
                raise ChatError("template_mismatch")
            end = pos + len(cand)
            if trained[i]:
                close = self._close.match(text, end) if self._close is not None else None
                spans.append((pos, close.end() if close else end))
            pos = end
        if text[pos:] != skeleton[sk:]:
            raise ChatError("template_mismatch")
        return [s for s in spans if s[1] > s[0]]

    @staticmethod
    def _next_marker(skeleton: str, start: int) -> int:
        at = skeleton.find("\ue000", start)
        return len(skeleton) if at < 0 else at


def mask_from_offsets(offsets: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """(tokens,) uint8: 1 where a token's character range [start, end) overlaps a span.

    ``offsets`` is (tokens, 2) character offsets into the rendered string;
    ``spans`` are sorted, disjoint [start, end). The rule of transformers'
    ``assistant_masks``: for each token, the first span ending after its
    start; trained if the token ends after that span begins.
    """
    n = len(offsets)
    if not spans or not n:
        return np.zeros(n, np.uint8)
    s = np.array(spans, dtype=np.int64)
    j = np.searchsorted(s[:, 1], offsets[:, 0], side="right")
    ok = j < len(s)
    out = np.zeros(n, np.uint8)
    out[ok] = offsets[ok, 1] > s[j[ok], 0]
    return out
