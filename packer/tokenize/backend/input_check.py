"""The backend of a build: decided from the tokenizer alone, from a record, or by a check on input texts.

``choose_backend`` (tokenizer.py) decides from the tokenizer alone where it
can; what is left is a check of tiktoken against HF tokenizers on a sample of
the build's own input texts. ``choose_for_build`` says which: the backend, or
the ``PendingCheck`` to run: the caller reads the texts of its sampled slices
(``sample_slices``), runs ``tiktoken_backend.run_input_check`` on them where it
likes (packer/pipeline/backend_check.py: on a worker while the others start)
and gives the result to ``PendingCheck.accept``.

A passed check is recorded (``InputRecord``, in check_cache's folder) under the tokenizer's
fingerprint, the encoder checked and its version, and the stamps (modification time, inode,
content) of the sampled inputs: a rebuild or a ``--resume`` over the same inputs takes the
verdict from the record and neither reads the sample nor parses the HF tokenizer. A changed
sampled input, another tokenizer or encoder, or an input without a content stamp checks again.

Slices are duck-typed (``packer.formats.Slice``: ``file`` with ``path``, ``format``,
``compression``, ``size`` and ``stamp``; ``start``, ``end``, ``max_items``): tokenize imports
no other stage.
"""

from __future__ import annotations

from dataclasses import replace

from .. import tokenizer as T
from . import check_cache, fastokens_backend
from .tiktoken_backend import SAMPLE_CHARS, SAMPLE_DOCS, SAMPLE_TEXT_CHARS
from .tiktoken_check import CheckResult

CHAT_REASON = "chat build: HF tokenizers, whose offsets place the trained spans"


class InputRecord:
    """The record of a passed input check for ``ordered`` (the sampled slices, ``sample_slices``)
    checked with encoder ``backend`` of ``tok``: ``key`` is None where one of them has no content
    stamp (then nothing is read or written). ``load()``: the recorded ``CheckResult`` or None."""

    def __init__(self, tok: T.TokenizerInfo, backend: str, ordered: list, text_field: str):
        from . import gigatoken_backend

        ver = {fastokens_backend.BACKEND: fastokens_backend.version, gigatoken_backend.BACKEND: gigatoken_backend.version
               }.get(backend, lambda: "")()
        parts = ["input", tok.fingerprint, tok.split_special, backend, ver, text_field, SAMPLE_DOCS, SAMPLE_CHARS,
                 SAMPLE_TEXT_CHARS, len(ordered)]
        for sl in ordered:
            f, stamp = sl.file, tuple(sl.file.stamp)
            if len(stamp) < 3 or not stamp[2]:
                self.key = None
                return
            parts += [f.path, f.format, f.compression, f.size, *stamp, sl.start, sl.end, sl.max_items]
        self.key = check_cache.input_key(parts)

    def load(self):
        got = check_cache.load_input(self.key) if self.key is not None else None
        return CheckResult(True, got[0], got[1], "") if got is not None else None

    def store(self, result) -> None:
        if self.key is not None and result.ok:
            check_cache.store_input(self.key, result.texts, result.tokens)


class PendingCheck:
    """The check on input texts still to run for ``tok`` (backend set to the encoder to check): the
    texts of ``ordered`` (the sampled slices), field ``text_field``, are checked by the caller; ``accept``
    takes the ``CheckResult`` and returns the tokenizer with the backend decided."""

    def __init__(self, later, tok: T.TokenizerInfo, ordered: list, text_field: str, record: InputRecord,
                 size: tuple[int, str] = (0, ""), requested: str = "auto"):
        self.later, self.tok, self.ordered, self.text_field, self.record = later, tok, ordered, text_field, record
        self.size, self.requested = size, requested

    def accept(self, result) -> T.TokenizerInfo:
        """``tok`` with the backend the check decided (HF where the encoder differed; a refused
        ``--tokenizer-backend tiktoken`` raises PackerError). A passed check is recorded."""
        self.record.store(result)
        return said(T.with_choice(self.tok, self.later.outcome(result)), self.requested, self.size)


def choose_for_build(tok: T.TokenizerInfo, requested: str, slices: list, text_field: str,
                     chat: bool = False, size: tuple[int, str] | None = None) -> tuple[T.TokenizerInfo, PendingCheck | None]:
    """The backend of a build over ``slices`` (all its input slices, in order): (tok decided, None)
    from the tokenizer alone, a chat build (HF), or the record of a passed input check; else
    (tok with the encoder to check, its ``PendingCheck``). It needs the HF tokenizer, which a build
    whose tokenizer and check are on record would otherwise parse first (0.5 s for Llama 3, serial).
    ``size``: (bytes of text the encoder will see, how they were counted; pipeline/backend_check.py's
    ``text_bytes``), which decides whether fastokens' load pays (``fastokens_backend.worth_it``; never the
    worker count); None: the input files' sizes on disk."""
    if chat:
        return replace(tok, backend="hf", backend_reason=CHAT_REASON), None
    if size is None:
        disk = sum({s.file.path: s.file.size for s in slices}.values())
        size = (disk, f"{disk:,} on disk")
    tok, later = T.choose_backend_later(tok, requested, size[0])
    if later is None:  # decided from the tokenizer alone
        return said(tok, requested, size), None
    ordered = sample_slices(slices)
    record = InputRecord(tok, later.backend, ordered, text_field)
    passed = record.load()
    if passed is not None:
        return said(T.with_choice(tok, later.outcome(passed)), requested, size), None
    return tok, PendingCheck(later, tok, ordered, text_field, record, size, requested)


def enough_bytes(tok: T.TokenizerInfo) -> int:
    """The input size (bytes of text) from which the backend choice no longer depends on it: fastokens'
    load pays over tiktoken (the larger of ``worth_it``'s two thresholds)."""
    return round(len(tok.json) * max(fastokens_backend.OVER_TIKTOKEN, fastokens_backend.OVER_HF))


def said(tok: T.TokenizerInfo, requested: str, size: tuple[int, str]) -> T.TokenizerInfo:
    """``tok`` whose backend reason also says, where auto chose between the exact encoders, the input
    size that chose: fastokens' load pays from OVER_TIKTOKEN times its tokenizer.json over tiktoken
    (OVER_HF where HF is the other), counted in bytes of text as the encoder sees them."""
    if requested != "auto":
        return replace(tok, backend_reason=f"asked for (--tokenizer-backend {requested}); {tok.backend_reason}") \
            if requested == tok.backend and not tok.backend_reason.startswith("asked for") else tok
    if tok.backend == "gigatoken":  # alone, byte_fallback BPE with a big tokenizer.json (gigatoken_backend.py)
        from .gigatoken_backend import ALONE_FROM_JSON_CHARS

        return replace(tok, backend_reason=tok.backend_reason + "; auto runs gigatoken before fastokens for byte_fallback "
                       f"BPE whose tokenizer.json is at least {ALONE_FROM_JSON_CHARS:,} characters (it loads and encodes "
                       "such a tokenizer faster: docs/tokenizers.md)")
    if tok.backend not in ("tiktoken", fastokens_backend.BACKEND):
        return tok
    j = len(tok.json)
    line = (f"; input {size[0]:,} bytes of text ({size[1]}); auto loads fastokens from "
            f"{round(j * fastokens_backend.OVER_TIKTOKEN):,} bytes where tiktoken is the other choice, from "
            f"{round(j * fastokens_backend.OVER_HF):,} where HF is ({fastokens_backend.OVER_TIKTOKEN:g}x, "
            f"{fastokens_backend.OVER_HF:g}x its tokenizer.json)")
    return replace(tok, backend_reason=tok.backend_reason + line)


def sample_slices(slices: list, max_slices: int = 64) -> list:
    """The slices the sample is read from, in the order it reads them: 8 spread over ``slices``, then the others."""
    n = min(8, len(slices))
    spread = sorted({round(i * (len(slices) - 1) / max(1, n - 1)) for i in range(n)})
    order = spread + sorted(set(range(len(slices))) - set(spread))
    return [slices[i] for i in order[:max_slices]]
