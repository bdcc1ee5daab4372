"""Where the backend check on input texts runs: before the units, or on a worker as the engine's FirstTask.

``choose_for_build`` (packer/tokenize/backend) decides the backend from the
tokenizer alone, a chat build or the record of a passed check where it can
(``decide``); what is left is a check of tiktoken against HF tokenizers on a
sample of the build's own input texts (``sample_texts``: read here, with the
formats). A build on one core runs it here before the units; a local build on
more cores leaves it to a worker, as the engine's ``FirstTask``, while the
other workers start tokenizing (``DeferredCheck``): no unit is assembled
before its verdict, and if tiktoken differed the build runs again on HF,
nothing written meanwhile.
"""

from __future__ import annotations

from ..errors import PackerError
from ..formats import REGISTRY, Skip, read_slice
from ..io import cpu_limit
from ..tokenize import TokenizerInfo, backend, loaded_hf
from ..tokenize.backend import SAMPLE_CHARS, SAMPLE_DOCS, SAMPLE_TEXT_CHARS, PendingCheck, sample_slices
from .config import BuildConfig
from .engines import FirstTask
from .unit import Job, encoder_for

# A record over this is left out of the sample (read past in 1 MB steps, as --max-record-mb does), not read
# whole for its first SAMPLE_TEXT_CHARS: the check runs on a worker beside the encoding, and a 50 MB line
# read for it cost that worker 3x the line again while another encoded the same line (issue 53.3).
SAMPLE_RECORD_BYTES = 16 << 20


class DeferredCheck:
    """The check left to a worker: ``task`` is the engine's FirstTask; after it ran, ``tok`` is the
    tokenizer with the backend decided, and ``fell_back`` says whether tiktoken differed (the
    engine then stopped before writing anything, and the build runs again on HF)."""

    def __init__(self, pending: PendingCheck):
        self.pending, self.tok, self.fell_back = pending, pending.tok, False
        self.task = FirstTask(check_input, (pending.ordered, pending.text_field), self._accept)

    def _accept(self, result) -> bool:
        self.tok = self.pending.accept(result)  # "tiktoken" asked for and refused raises PackerError here
        self.fell_back = self.tok.backend == "hf"  # tiktoken or fastokens (same ids) passed
        return not self.fell_back


def decide(cfg: BuildConfig, tok: TokenizerInfo, units, chat) -> tuple[TokenizerInfo, DeferredCheck | None]:
    """The backend of the build: decided by ``choose_for_build``, here after a check on input texts,
    or (a local build on more than one core) left to a worker."""
    slices = [s for u in units for s in u.slices]
    tok, pending = backend.choose_for_build(tok, cfg.run.tokenizer_backend, slices, cfg.output.text_field,
                                            chat is not None)
    if pending is None:
        return tok, None
    workers = cfg.run.workers or cpu_limit().count  # the CPUs this process may use (affinity, cgroup quota)
    if cfg.run.engine == "local" and workers > 1:
        return tok, DeferredCheck(pending)
    return pending.accept(_check(tok, pending.ordered, pending.text_field)), None


def prefetch(cfg: BuildConfig, tok: TokenizerInfo, units) -> None:
    """``decide``'s checks of ``tok``'s backend, run now for their results alone: the tokenize/
    backend modules keep them in this process (the conversion, the hard strings, fastokens' load),
    so ``decide`` finds them at no cost when the build runs ``tok``. For a first build whose
    tokenizer's view is still being built by transformers in a child (view_child.py); wasted only
    where the view differs from the file. A refusal is said by ``decide``, on the tokenizer it gets."""
    slices = [s for u in units for s in u.slices]
    try:
        backend.choose_for_build(tok, cfg.run.tokenizer_backend, slices, cfg.output.text_field)
    except PackerError:
        pass


def check_input(job: Job, slices: list, text_field: str):
    """The deferred check, on a pool worker: tiktoken against HF tokenizers on the sample of input
    texts read from ``slices`` (``sample_slices``); returns the ``CheckResult``."""
    return _check(job.tokenizer, slices, text_field)


def _check(tok: TokenizerInfo, ordered: list, text_field: str):
    texts = read_sample(ordered, text_field)
    return backend.run_input_check(encoder_for(tok).tiktoken, loaded_hf(tok), texts)


def sample_texts(slices, text_field: str = "text", max_docs: int = SAMPLE_DOCS, max_chars: int = SAMPLE_CHARS,
                 max_slices: int = 64) -> list[str]:
    """Up to ``max_docs`` input texts (each cut to SAMPLE_TEXT_CHARS), a few
    from the start of each of 8 slices spread over ``slices``
    (``packer.formats.Slice``), then of the slices after the first, until
    ``max_docs``, ``max_chars`` or ``max_slices``. Bad records are passed over:
    the build reports them, with file and line."""
    return read_sample(sample_slices(list(slices), max_slices), text_field, max_docs, max_chars)


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
        # fork its workers (see packer.pipeline.engines.local.make_pool).
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
        it = read_slice(sl, text_field, max_record=SAMPLE_RECORD_BYTES)
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
