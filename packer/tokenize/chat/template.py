"""Chat templates: a conversation rendered as transformers renders it, tokenized, with a loss mask.

``load_chat_template`` (main process, once) finds the template (the
tokenizer's tokenizer_config.json or chat_template.jinja, or a file given
with ``--chat-template``) and the special tokens it reads; ``ChatRenderer``
(one per worker) renders conversations in the environment of transformers'
``apply_chat_template`` (packer/tokenize/chat/sandbox.py, bounded in time
and size) and finds the character spans to train on (docs/chat.md):

- a template with ``{% generation %}`` tags: the spans its tags render, as
  transformers computes ``assistant_masks`` (what TRL's ``assistant_only_loss``
  trains);
- any other template: each trained reply is what the model generates after
  its generation prompt. The conversation before the reply is rendered with
  ``add_generation_prompt=True``; where that rendering stops agreeing with
  the whole conversation's, the reply starts, and it ends with its own
  end-of-turn token (each token the template writes after a reply, a tool
  call or a tool result: ``<|eot_id|>``, ``<|im_end|>``, ``</s>``,
  ``<end_of_turn>``; gpt-oss's ``<|end|>``, ``<|call|>``, ``<|return|>``):
  the last one in what the conversation through it renders alike, else the
  first after its content. So the reasoning block, the content (trimmed or
  rewritten as the template likes) and the tool calls a template renders
  are trained, and the end-of-turn token; the role header, prompts and tool
  results are not. A template that renders the turns before a reply
  differently once the reply follows cannot be read this way: that
  conversation is skipped (``template_not_prefix``), never guessed at.

``mask_from_offsets`` turns spans into a per-token mask the way transformers
does: a token is trained when its character range overlaps a span.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone

from ...errors import PackerError
from . import sandbox
from .sandbox import LIMIT_FACTOR, MIN_CHARS, Budget, TemplateLimit, has_generation_tags, new_environment, uses_date
from .skeleton import Skeletons
from .source import find_template, read_config, token_text
from .spans import common_prefix, mask_from_offsets, merged, realigned

__all__ = ["ChatError", "ChatRenderer", "ChatSpec", "ROLES", "TRAIN_ON", "load_chat_template", "mask_from_offsets"]

ROLES = ("system", "user", "assistant", "tool")
# What --train-on trains (docs/chat.md, "The loss mask"): assistant = every assistant reply as the model
# generates it; assistant+tool = and the tool results; all = every token.
TRAIN_ON = ("assistant", "assistant+tool", "all")
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
    end_tokens: tuple[str, ...]  # the tokens that close a reply (sorted: longest first, then by text)
    train_on: str = "assistant"  # one of TRAIN_ON
    source: str = ""  # where the template came from, for messages
    date: str = ""  # the date strftime_now gives (ISO, fixed at the build's start), if the template reads it
    generation: bool = False  # the template has {% generation %} tags: they give the assistant spans

    def fingerprint(self) -> str:
        blob = json.dumps([self.template, list(self.specials), list(self.end_tokens), self.train_on])
        return hashlib.sha256(blob.encode()).hexdigest()


def load_chat_template(tokenizer: str | None, template_file: str | None, special_tokens: list[str],
                       train_on: str = "assistant", date: str | None = None) -> ChatSpec:
    """The chat template for ``tokenizer`` (a folder or tokenizer.json path), or from ``template_file``.

    ``special_tokens`` are the tokenizer's special added tokens (the
    candidates for an end-of-turn token); ``train_on``: one of TRAIN_ON (BuildConfig.validate checks
    it); ``date``: the date a resumed build
    recorded (ISO), else now. Raises ``PackerError`` in one line when there
    is no template, or it cannot be read or compiled.
    """
    if tokenizer is None:
        raise PackerError("--chat needs --tokenizer: a folder with tokenizer.json and tokenizer_config.json")
    try:
        import jinja2  # noqa: F401
    except ImportError:
        raise PackerError("--chat needs jinja2 to render chat templates: pip install 'packer[chat]'") from None
    folder = tokenizer if os.path.isdir(tokenizer) else os.path.dirname(os.path.abspath(tokenizer))
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    cfg = read_config(cfg_path)
    template, source = find_template(folder, cfg, cfg_path, template_file)
    if template is None:
        raise PackerError(f"no chat template for {tokenizer}: none in {cfg_path} or chat_template.jinja; "
                          "pass --chat-template FILE")
    specials = tuple((k, s) for k in _SPECIAL_KEYS if (s := token_text(cfg.get(k))) is not None)
    if uses_date(template):
        date = date or datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    spec = ChatSpec(template, specials, (), train_on, source, date if uses_date(template) else "",
                    has_generation_tags(template))
    try:
        renderer = ChatRenderer(spec)
    except Exception as e:  # a syntax error, or a bound hit while compiling
        raise PackerError(f"chat template from {source} does not compile: {type(e).__name__}: {e}") from None
    ends = renderer.probe_end_tokens(special_tokens)
    return ChatSpec(template, specials, tuple(sorted(ends, key=lambda t: (-len(t), t))), train_on, source,
                    spec.date, spec.generation)


def _text_size(x, depth: int = 0) -> int:
    """The characters of the strings in a conversation (what its rendering may be measured against)."""
    if isinstance(x, str):
        return len(x)
    if depth > 64:
        return 0
    if isinstance(x, dict):
        return sum(_text_size(v, depth + 1) + len(k) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return sum(_text_size(v, depth + 1) for v in x)
    return 8


class ChatRenderer:
    """Renders conversations and finds their trained character spans (one per process)."""

    def __init__(self, spec: ChatSpec):
        self.spec = spec
        now = datetime.fromisoformat(spec.date) if spec.date else None
        self._env = new_environment(now)
        self._env.budget = Budget(sandbox.RENDER_SECONDS, MIN_CHARS)
        self._tpl = self._env.from_string(spec.template)
        self._kw = dict(spec.specials)
        self._chars = MIN_CHARS
        self._timeouts = 0  # conversations in a row over their time budget
        self._skeletons = Skeletons()  # per conversation shape: where its replies start (skeleton.py)
        self._prefixes: dict = {}  # the renderings of a conversation's first messages (render: _prefix)

    def _render(self, messages: list[dict], generation_prompt: bool = False) -> tuple[str, list]:
        """(text, generation spans): one bounded render, as ``apply_chat_template`` renders it."""
        import jinja2

        env = self._env
        seconds = sandbox.RENDER_SECONDS * (1 + self._chars / LIMIT_FACTOR / (8 << 20))
        env.budget = budget = Budget(seconds, self._chars)
        blocks: list[str] = []
        env.packer_blocks, env.packer_spans = blocks, []
        n = 0
        try:
            for piece in self._tpl.generate(messages=messages, tools=None, documents=None,
                                            add_generation_prompt=generation_prompt, **self._kw):
                blocks.append(piece)
                n += len(piece)
                budget.size(n, "an output")
                budget.tick()
        except TemplateLimit as e:
            self._timeouts = self._timeouts + 1 if e.timeout else 0
            if self._timeouts >= sandbox.TIMEOUTS_IN_A_ROW:
                raise PackerError(f"the chat template from {self.spec.source or 'the tokenizer'} ran over its time "
                                  f"budget on {self._timeouts} conversations in a row: it does not finish "
                                  "(docs/chat.md, Bounds)") from None
            raise ChatError("template_limit", str(e)) from None
        except jinja2.exceptions.TemplateError as e:
            raise ChatError("template_error", str(e)) from None
        except RecursionError:
            raise ChatError("template_error", "the template recursed too deeply") from None
        except MemoryError:
            raise ChatError("template_limit", "out of memory while rendering") from None
        except Exception as e:  # a template failing on odd input (a type error in jinja): the record's fault
            raise ChatError("template_error", f"{type(e).__name__}: {e}") from None
        finally:
            env.packer_blocks = None
        self._timeouts = 0
        text = "".join(blocks)
        if not text:
            raise ChatError("empty_render", "the template rendered nothing for this conversation")
        return text, list(env.packer_spans)

    def render_text(self, messages: list[dict]) -> str:
        """The rendered string, as ``apply_chat_template(messages, tokenize=False)`` gives it."""
        self._chars = max(MIN_CHARS, LIMIT_FACTOR * _text_size(messages))
        return self._render(messages)[0]

    def render(self, messages: list[dict], trained: list[bool]) -> tuple[str, list[tuple[int, int]]]:
        """(rendered text, trained spans): spans are sorted, disjoint [start, end) character offsets.

        ``trained[i]``: message i is in the part of the record that is
        trained (all of a ``messages`` record; a prompt/completion record's
        completion); which of those messages are trained is ``train_on``'s.
        """
        self._chars = max(MIN_CHARS, LIMIT_FACTOR * _text_size(messages))
        self._prefixes = {}
        text, tagged = self._render(messages)
        if self.spec.train_on == "all":
            return text, [(0, len(text))]
        roles = ("assistant", "tool") if self.spec.train_on == "assistant+tool" else ("assistant",)
        which = [i for i, m in enumerate(messages) if trained[i] and m["role"] in roles]
        if not which:
            return text, []
        spans: list[tuple[int, int]] = []
        if self.spec.generation:  # the tags give the replies' spans; a prompt's own replies are not trained
            replies = [i for i in which if messages[i]["role"] == "assistant"]
            if replies:  # (a completion's tagged span may open before its generation prompt ends: kept whole)
                floor = 0 if all(trained) else self.turn_start(text, messages, replies[0], 0)
                spans += [s for s in tagged if s[1] > floor]
            which = [i for i in which if messages[i]["role"] != "assistant"]
        replies = [i for i in which if messages[i]["role"] == "assistant"]
        fast = (self._skeletons.reply_starts(self, text, messages, replies) or {}) if replies else {}
        floor = 0
        for i in which:
            span = self._close(text, i, *fast[i]) if i in fast else self._span(text, messages, i, floor)
            spans.append(span)
            floor = span[1]
        return text, merged(spans)

    def _prefix(self, messages: list[dict], n: int, generation_prompt: bool = False) -> str:
        """The rendering of ``messages[:n]``, kept for the conversation being rendered (``turn_start`` and
        ``_span`` ask for the same ones)."""
        key = (id(messages), n, generation_prompt)
        kept = self._prefixes.get(key)
        if kept is None or kept[0] is not messages:
            kept = self._prefixes[key] = (messages, self._render(messages[:n], generation_prompt)[0])
        return kept[1]

    def turn_start(self, text: str, messages: list[dict], i: int, floor: int) -> int:
        """Where message i's turn starts in ``text``: a reply, after its generation prompt (the
        conversation before it rendered with ``add_generation_prompt=True``: where that stops
        agreeing with ``text``; a prompt that text writes after an end-of-turn token of its own, as a
        template writing end-of-turn tokens only between messages does, is found after it); another
        message, after the conversation before it, and not before ``floor`` (the end of the span
        before). ``ChatError`` if the turns before a reply render otherwise once it follows."""
        if messages[i]["role"] != "assistant":
            return max(floor, common_prefix(self._prefix(messages, i), text) if i else 0)
        try:
            prompt = self._prefix(messages, i, True) if i else ""
        except ChatError:
            if i:
                raise
            prompt = ""  # a conversation that starts with a reply: the template may need a first message
        if text.startswith(prompt):
            return len(prompt)
        before = self._prefix(messages, i)
        header = prompt[len(before):] if prompt.startswith(before) else ""
        if not text.startswith(before):
            at = realigned(text, before, header, floor)
            if at is None:
                raise ChatError("template_not_prefix",
                                f"the turns before message {i} render differently once a reply follows them")
            return at
        at = text.find(header, len(before)) if header else -1
        if at > len(before) and not self._strip_ends(text[len(before):at]).strip():
            return at + len(header)
        return max(len(before), common_prefix(prompt, text))

    def _strip_ends(self, s: str) -> str:
        for t in self.spec.end_tokens:
            s = s.replace(t, "")
        return s

    def _span(self, text: str, messages: list[dict], i: int, floor: int) -> tuple[int, int]:
        """Message i's trained span: from its turn's start through its own end-of-turn token: the last one
        in what the conversation through message i renders as ``text`` does, or else the first one after
        its content (as rendered: as is, or trimmed as templates trim)."""
        start = self.turn_start(text, messages, i, floor)
        first = self._end_after(text, start)
        after = start  # (the content is looked for only to step over an end-of-turn token in it)
        content = messages[i].get("content")
        if isinstance(content, str) and content:
            for cand in (content, content.strip(), content.lstrip("\n"), content.strip("\n"), content.rstrip(),
                         content.lstrip()):
                at = text.find(cand, start) if cand else -1
                if 0 <= at and (first is None or at < first[0]):
                    after = at + len(cand)
                    break
        # Where the conversation through message i stops agreeing with the whole one (its end, or where the
        # template writes this message otherwise once more follow: <|return|> for <|end|>, say): an
        # end-of-turn token before that point closes the message (a tool call after its analysis: <|call|>).
        agreed = common_prefix(self._prefix(messages, i + 1), text)
        own = self._ends_in(text, after, agreed)
        if own:
            return start, own[-1][1]
        return self._close(text, i, start, after)

    def _close(self, text: str, i: int, start: int, after: int) -> tuple[int, int]:
        """Message i's span from ``start`` (its turn), through the first end-of-turn token at or after
        ``after`` (the end of its content as rendered); with none after it (a template that writes them
        only between messages), through its content."""
        end = self._end_after(text, after)
        if end is None:
            if after > start:
                return start, after
            raise ChatError("template_mismatch", f"message {i} renders nothing known and no end-of-turn token")
        return start, end[1]

    def _end_after(self, text: str, pos: int) -> tuple[int, int] | None:
        """(start, end) of the first end-of-turn token at or after ``pos``, or None."""
        ends = [(at, at + len(t)) for t in self.spec.end_tokens if (at := text.find(t, pos)) >= 0]
        return min(ends) if ends else None

    def _ends_in(self, text: str, lo: int, hi: int) -> list[tuple[int, int]]:
        """The end-of-turn tokens lying wholly in text[lo:hi], in order."""
        out = []
        while (e := self._end_after(text, lo)) is not None and e[1] <= hi:
            out.append(e)
            lo = e[1]
        return out

    def probe_end_tokens(self, special_tokens: list[str]) -> set[str]:
        """The special tokens that end a turn: each one the template writes right after the content of a
        reply (not the last, and the last), of a tool call's arguments or of a tool's result, on small
        conversations (gpt-oss: <|end|>, <|return|>, <|call|>), and ``eos_token`` where the template
        writes it. Where no probe renders (a template that needs more), every special token the
        template's source names."""
        passed = {t for _, t in self.spec.specials}  # (eos_token and kin: written through their names)
        written = {t for t in special_tokens if t in self.spec.template or t in passed}
        eos = dict(self.spec.specials).get("eos_token")
        out = {eos} if eos in written else set()
        hits = set()
        for msgs, marks in _PROBES:
            try:
                text = self.render_text(msgs)
            except ChatError:
                continue
            for m in marks:
                at = text.find(m)
                rest = text[at + len(m):].lstrip(" \n\"'}]") if at >= 0 else ""
                hit = [t for t in written if rest.startswith(t)]
                if hit:
                    hits.add(max(hit, key=len))
        return out | hits if hits else (out or written)


def _probes() -> list:
    """(conversation, markers after which an end-of-turn token is looked for): private-use markers."""
    u, s = {"role": "user", "content": "\ue000"}, {"role": "system", "content": "\ue002"}

    def a(k):
        return {"role": "assistant", "content": chr(0xe010 + k)}

    call = {"role": "assistant", "content": "\ue020",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"q": "\ue021"}}}]}
    tool = {"role": "tool", "content": "\ue022"}
    return [([u, a(0)], ["\ue010"]), ([s, u, a(0)], ["\ue010"]), ([u, a(1), u, a(0)], ["\ue011", "\ue010"]),
            ([u, call, tool, a(0)], ["\ue021", "\ue022", "\ue010"]), ([u, call, tool], ["\ue020", "\ue021", "\ue022"])]


_PROBES = _probes()
