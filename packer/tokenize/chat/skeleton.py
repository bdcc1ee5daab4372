"""The fast way to a plain conversation's reply starts: found once per shape, on a skeleton.

``ChatRenderer`` finds where a reply starts by rendering the conversation
before it with ``add_generation_prompt=True`` (packer/tokenize/chat/template.py): one
more render per reply. Conversations of one shape (the same roles, each
content empty or not, no other fields) mostly share that work: it is done
once on the shape's skeleton (every non-empty content replaced by a unique
marker) and carried to each conversation through an alignment that is
checked character for character: the conversation's rendering must be the
skeleton's template text with each content (as is, or trimmed as templates
trim) in place of its marker. Where the check fails (a template that
rewrites content, or branches on it) the caller falls back to the exact
renders; the spans are the same either way (tests/tokenize/chat/test_template.py).
"""

from __future__ import annotations


def _marker(i: int) -> str:
    # Private-use characters: no template trims or matches them, no real text holds them.
    return f"\ue000{i}\ue001"


def shape(messages: list[dict]):
    """The key of a plain conversation's shape, or None (other fields: the exact renders are used)."""
    key = []
    for m in messages:
        c = m.get("content")
        if len(m) != 2 or type(c) is not str:
            return None
        key.append((m["role"], not c))
    return tuple(key)


class Skeletons:
    """Per shape: the skeleton's rendering, its markers, and where each reply starts in it."""

    def __init__(self, limit: int = 4096):
        self._kept: dict = {}
        self._limit = limit

    def reply_starts(self, renderer, text: str, messages: list[dict], replies: list[int]) -> dict | None:
        """{reply index: (start, end of its content)} in ``text``, or None where the fast way does not apply."""
        key = shape(messages)
        if key is None:
            return None
        sk = self._kept.get(key)
        if sk is None:
            sk = self._skeleton(renderer, messages)
            if len(self._kept) >= self._limit:
                self._kept.clear()
            self._kept[key] = sk
        if sk is None or not set(replies) <= set(sk[2]):
            return None
        aligned = _align(text, sk[0], sk[1], messages)
        if aligned is None:
            return None
        segments, content_at = aligned
        out = {}
        for i in replies:
            at = _map(sk[2][i], segments)
            if at is None:
                return None
            out[i] = (at, content_at.get(i, (at, at))[1])
        return out

    @staticmethod
    def _skeleton(renderer, messages):
        """(skeleton text, [(marker index, at)], {reply: start}) for this shape, or None."""
        skel = [{"role": m["role"], "content": _marker(i) if m["content"] else ""} for i, m in enumerate(messages)]
        try:
            text = renderer._render(skel)[0]  # (under the conversation's own budget)
            starts = {i: renderer.turn_start(text, skel, i, 0) for i, m in enumerate(skel) if m["role"] == "assistant"}
        except ValueError:  # (a ChatError: this shape goes the exact way)
            return None
        marks = sorted((at, i) for i, m in enumerate(skel) if m["content"] and (at := text.find(m["content"])) >= 0)
        return text, [(i, at) for at, i in marks], starts


def _align(text: str, skeleton: str, marks: list, messages: list[dict]):
    """([(skeleton start, text start, length)] of the template's own text, {i: (start, end) of content i}),
    or None if ``text`` is not the skeleton with the contents put in."""
    segments, content_at = [], {}
    pos = sk = 0
    for n, (i, at) in enumerate(marks):
        between = skeleton[sk:at]
        if not text.startswith(between, pos):
            return None
        segments.append((sk, pos, len(between)))
        pos += len(between)
        sk = at + len(_marker(i))
        nxt = skeleton[sk:marks[n + 1][1] if n + 1 < len(marks) else len(skeleton)]
        c = messages[i]["content"]
        for cand in (c, c.strip(), c.lstrip("\n"), c.strip("\n"), c.rstrip(), c.lstrip()):
            if text.startswith(cand, pos) and text.startswith(nxt, pos + len(cand)):
                break
        else:
            return None
        content_at[i] = (pos, pos + len(cand))
        pos += len(cand)
    if text[pos:] != skeleton[sk:]:
        return None
    segments.append((sk, pos, len(skeleton) - sk))
    return segments, content_at


def _map(at: int, segments: list) -> int | None:
    """A skeleton offset in the template's own text, as an offset in the conversation's text."""
    for sk, pos, n in segments:
        if sk <= at <= sk + n:
            return pos + at - sk
    return None
