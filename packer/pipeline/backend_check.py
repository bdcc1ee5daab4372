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
from ..io import cpu_limit, expanded_length, open_stream
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
    size = None if chat is not None or tok.kind != "hf" else text_bytes(slices, backend.enough_bytes(tok))
    tok, pending = backend.choose_for_build(tok, cfg.run.tokenizer_backend, slices, cfg.output.text_field,
                                            chat is not None, size)
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
        size = text_bytes(slices, backend.enough_bytes(tok)) if tok.kind == "hf" else None
        backend.choose_for_build(tok, cfg.run.tokenizer_backend, slices, cfg.output.text_field, size=size)
    except PackerError:
        pass


PREFIX_BYTES = 1 << 20  # compressed bytes read from each sampled file
SAMPLED_FILES = 4  # files of each kind (compression, parquet) sampled, spread over them


def text_bytes(slices, enough: int | None = None) -> tuple[int, str]:
    """(bytes the encoder will see, estimated; how, in words): the input's size as the tokenizer reads
    it, not as it lies on disk. Plain files count their size; a compressed file what its first
    PREFIX_BYTES decompress to, scaled to its size (the whole file where it is smaller); a parquet file
    its row groups' uncompressed size. Of each kind up to SAMPLED_FILES files are measured, spread
    over them, and the others scaled by their ratio. A file that cannot be read counts its size:
    the build reports it. Where the size on disk is already ``enough`` (the most the choice asks),
    nothing is read: decompressed, it is no less."""
    files = list({s.file.path: s.file for s in slices}.values())
    disk = sum(f.size for f in files)
    if enough is not None and disk >= enough:
        return disk, f"{disk:,} on disk, no less decompressed"
    kinds: dict = {}
    for f in files:
        kind = "parquet" if f.format == "parquet" else f.compression
        kinds.setdefault(kind, []).append(f)
    total, said = 0, []
    for kind, group in kinds.items():
        size = sum(f.size for f in group)
        if kind is None:
            total += size
            continue
        n = min(SAMPLED_FILES, len(group))
        picked = [group[i] for i in sorted({round(i * (len(group) - 1) / max(1, n - 1)) for i in range(n)})]
        seen = [(_expanded(f), min(f.size, PREFIX_BYTES) if kind != "parquet" else f.size) for f in picked]
        ratio = sum(e for e, _ in seen) / max(1, sum(b for _, b in seen))
        total += round(size * ratio)
        said.append(f"{kind} {ratio:.1f}x on {len(picked)} of {len(group)} file{'s' * (len(group) != 1)}")
    how = f"{disk:,} on disk" + (f"; estimated: {', '.join(said)}" if said else "")
    return total, how


def _expanded(f) -> int:
    """What ``_ratio`` measures of ``f``: its first PREFIX_BYTES decompressed, or a parquet file's row groups."""
    import threading

    before = set(threading.enumerate())
    try:
        if f.format == "parquet":
            import pyarrow.parquet as pq

            from ..io import storage_for

            meta = pq.ParquetFile(storage_for(f.path).arrow_file()).metadata
            return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        with open_stream(f.path, None, 0, PREFIX_BYTES) as s:
            return expanded_length(s.read(PREFIX_BYTES), f.compression)
    except Exception:  # unreadable here: the build says so, with its file
        return min(f.size, PREFIX_BYTES) if f.format != "parquet" else f.size
    finally:
        for t in set(threading.enumerate()) - before:  # read-ahead threads: the build forks after this
            t.join(timeout=2.0)


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
