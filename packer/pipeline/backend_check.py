"""The backend check on input texts: is the fast backend (tiktoken) exact on this corpus?

``choose_backend`` (packer/tokenize) decides from the tokenizer alone where it
can; what is left is a check of tiktoken against HF tokenizers on a sample of
the build's own input texts (``sample_texts``). A build on one core runs it
here before the units (``decide_now``); a local build on more cores leaves it
to a worker, as the engine's ``FirstTask``, while the other workers start
tokenizing (``DeferredCheck``): no unit is assembled before its verdict, and
if tiktoken differed the build runs again on HF, nothing written meanwhile.

A passed check is recorded (``InputRecord``, in check_cache's folder) under the tokenizer's
fingerprint, the encoder checked and its version, and the stamps (modification time, inode,
content) of the sampled inputs: a rebuild or a ``--resume`` over the same inputs takes the
verdict from the record and neither reads the sample nor parses the HF tokenizer. A changed
sampled input, another tokenizer or encoder, or an input without a content stamp checks again.
"""

from __future__ import annotations

import os
from dataclasses import replace

from ..formats import REGISTRY, Skip, read_slice
from ..tokenize import TokenizerInfo
from ..tokenize import check_cache, fastokens_backend, tiktoken_backend
from ..tokenize.tiktoken_backend import SAMPLE_CHARS, SAMPLE_DOCS, SAMPLE_TEXT_CHARS
from ..tokenize.tokenizer import choose_backend_later, loaded_hf, with_choice
from .config import BuildConfig
from .engines import FirstTask
from .unit import Job, encoder_for

CHAT_REASON = "chat build: HF tokenizers, whose offsets place the trained spans"


class DeferredCheck:
    """The check left to a worker: ``task`` is the engine's FirstTask; after it ran, ``tok`` is the
    tokenizer with the backend decided, and ``fell_back`` says whether tiktoken differed (the
    engine then stopped before writing anything, and the build runs again on HF)."""

    def __init__(self, later, tok: TokenizerInfo, ordered: list, text_field: str, record: "InputRecord"):
        self.later, self.tok, self.fell_back, self.record = later, tok, False, record
        self.task = FirstTask(check_input, (ordered, text_field), self._accept)

    def _accept(self, result) -> bool:
        self.record.store(result)
        c = self.later.outcome(result)  # "tiktoken" asked for and refused raises PackerError here
        self.tok = with_choice(self.tok, c)
        self.fell_back = c.backend == "hf"  # tiktoken or fastokens (same ids) passed
        return not self.fell_back


class InputRecord:
    """The record of a passed input check for ``ordered`` (the sampled slices, ``sample_slices``)
    checked with encoder ``backend`` of ``tok``: ``key`` is None where one of them has no content
    stamp (then nothing is read or written). ``load()``: the recorded ``CheckResult`` or None."""

    def __init__(self, tok: TokenizerInfo, backend: str, ordered: list, text_field: str):
        ver = fastokens_backend.version() if backend == fastokens_backend.BACKEND else ""
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
        return tiktoken_backend.CheckResult(True, got[0], got[1], "") if got is not None else None

    def store(self, result) -> None:
        if self.key is not None and result.ok:
            check_cache.store_input(self.key, result.texts, result.tokens)


def decide(cfg: BuildConfig, tok: TokenizerInfo, units, chat) -> tuple[TokenizerInfo, DeferredCheck | None]:
    """The backend of the build: from the record of a passed input check (``InputRecord``), decided
    here, or (a local build on more than one core) left to a worker. It needs the HF tokenizer, which
    a build whose tokenizer and check are on record would otherwise parse in the main process first
    (0.5 s for Llama 3, serial)."""
    if chat is not None:
        return replace(tok, backend="hf", backend_reason=CHAT_REASON), None
    slices = [s for u in units for s in u.slices]
    text_field = cfg.output.text_field
    workers = cfg.run.workers or os.cpu_count() or 1
    fast = fastokens_backend.worth_it(sum({s.file.path: s.file.size for s in slices}.values()))  # not workers
    tok, later = choose_backend_later(tok, cfg.run.tokenizer_backend, fast)
    if later is None:  # decided from the tokenizer alone
        return tok, None
    ordered = sample_slices(slices)
    record = InputRecord(tok, later.backend, ordered, text_field)
    passed = record.load()
    if passed is not None:
        return with_choice(tok, later.outcome(passed)), None
    if cfg.run.engine == "local" and workers > 1:
        return tok, DeferredCheck(later, tok, ordered, text_field, record)
    result = _check(tok, ordered, text_field)
    record.store(result)
    return with_choice(tok, later.outcome(result)), None


def check_input(job: Job, slices: list, text_field: str):
    """The deferred check (``tiktoken_backend.InputCheck``), on a pool worker: tiktoken against HF
    tokenizers on the sample of input texts read from ``slices`` (``sample_slices``); returns the
    ``CheckResult``."""
    return _check(job.tokenizer, slices, text_field)


def _check(tok: TokenizerInfo, ordered: list, text_field: str):
    texts = read_sample(ordered, text_field)
    return tiktoken_backend.run_input_check(encoder_for(tok).tiktoken, loaded_hf(tok), texts)


def sample_texts(slices, text_field: str = "text", max_docs: int = SAMPLE_DOCS, max_chars: int = SAMPLE_CHARS,
                 max_slices: int = 64) -> list[str]:
    """Up to ``max_docs`` input texts (each cut to SAMPLE_TEXT_CHARS), a few
    from the start of each of 8 slices spread over ``slices``
    (``packer.formats.Slice``), then of the slices after the first, until
    ``max_docs``, ``max_chars`` or ``max_slices``. Bad records are passed over:
    the build reports them, with file and line."""
    return read_sample(sample_slices(list(slices), max_slices), text_field, max_docs, max_chars)


def sample_slices(slices: list, max_slices: int = 64) -> list:
    """The slices ``sample_texts`` reads, in the order it reads them: 8 spread over ``slices``, then the others."""
    n = min(8, len(slices))
    spread = sorted({round(i * (len(slices) - 1) / max(1, n - 1)) for i in range(n)})
    order = spread + sorted(set(range(len(slices))) - set(spread))
    return [slices[i] for i in order[:max_slices]]


def read_sample(ordered: list, text_field: str = "text", max_docs: int = SAMPLE_DOCS,
                max_chars: int = SAMPLE_CHARS) -> list[str]:
    """``sample_texts`` of the slices ``sample_slices`` chose (``ordered``)."""
    import threading

    before = set(threading.enumerate())
    try:
        return _sample(ordered, text_field, max_docs, max_chars)
    finally:
        # Readers stopped early leave their read-ahead threads to finish a
        # last block; wait for them, so the build finds one thread and can
        # fork its workers (see packer.pipeline.local._make_pool).
        for t in set(threading.enumerate()) - before:
            t.join(timeout=2.0)


def _sample(ordered, text_field: str, max_docs: int, max_chars: int) -> list[str]:
    per = -(-max_docs // max(1, min(8, len(ordered))))
    out: list[str] = []
    chars = 0
    for sl in ordered:
        got = 0
        head = REGISTRY[sl.file.format].head(sl, SAMPLE_TEXT_CHARS)
        if head is not None:
            if head:
                out.append(head)
                chars += len(head)
            if chars >= max_chars or len(out) >= max_docs:
                break
            continue
        it = read_slice(sl, text_field)
        try:
            for rec in it:
                if isinstance(rec, Skip):
                    continue
                out.append(rec.text[:SAMPLE_TEXT_CHARS])
                chars += len(out[-1])
                got += 1
                if got >= per or chars >= max_chars or len(out) >= max_docs:
                    break
        except Exception:  # a broken input is the build's to report, with its file and line
            pass
        finally:
            it.close()
        if chars >= max_chars or len(out) >= max_docs:
            break
    return out
