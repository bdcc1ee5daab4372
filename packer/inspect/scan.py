"""Reading one shard for ``packer stats``: hashed, parsed and checked batch by batch, in one pass."""

from __future__ import annotations

import mmap

import numpy as np
import pyarrow as pa
import xxhash

from .. import shards as S
from ..io import Storage
from . import loss_mask
from .report import MAGIC, BLOCK, MAX_PER_KIND, Problem, ShardFigures, Report

# --------------------------------------------------------------------------
# One pass over one shard.


class MappedReader:
    """A read-only file object over a memory map that hashes every byte it hands out.

    ``read`` returns zero-copy memoryview slices, so pa.PythonFile parses the
    Arrow stream straight from the page cache while the bytes are hashed: one
    pass, no copy. Pages already consumed are dropped from this process's
    page tables (MADV_DONTNEED: they stay in the page cache, a later touch
    maps them again), so resident memory stays at about ``DROP_EVERY``
    whatever the shard size.
    """

    DROP_EVERY = 16 << 20

    def __init__(self, mm, hasher, on_bytes=None):  # mm: an mmap.mmap, or any buffer (a remote shard's bytes)
        self._mm, self._mv, self._h, self._on = mm, memoryview(mm), hasher, on_bytes
        self.pos = 0
        self._dropped = 0
        self.closed = False

    def read(self, n: int = -1):
        end = len(self._mv) if n is None or n < 0 else min(len(self._mv), self.pos + n)
        data = self._mv[self.pos : end]
        self._h.update(data)
        if self._on is not None:
            self._on(end - self.pos)
        if self.pos - self._dropped >= self.DROP_EVERY and isinstance(self._mm, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            upto = self.pos // mmap.PAGESIZE * mmap.PAGESIZE
            self._mm.madvise(mmap.MADV_DONTNEED, self._dropped, upto - self._dropped)
            self._dropped = upto
        self.pos = end
        return data

    def tell(self) -> int:
        return self.pos

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return False

    def close(self) -> None:  # the caller owns the map
        self.closed = True

    def release(self) -> None:
        self._mv.release()


class ShardScan:
    """Checks and counts one shard, record batch by record batch."""

    def __init__(self, report: Report, path: str, seq_len: int, dtype: str, vocab: int, pad_id: int, deep: bool):
        self.rep, self.path, self.seq_len, self.dtype = report, path, seq_len, dtype
        self.vocab, self.pad_id, self.deep = vocab, pad_id, deep
        self.rows = 0
        self.problems: list[Problem] = []  # this shard's, handed to the report by the caller
        self.found: dict[str, int] = {}  # kind -> problems seen (only MAX_PER_KIND are listed)
        self.piece_doc: list[np.ndarray] = []
        self.piece_off: list[np.ndarray] = []
        self.piece_len: list[np.ndarray] = []
        self.padding = 0
        self.trained: int | None = None  # loss_mask slots trained on (chat builds, verifying reads)

    def problem(self, kind: str, message: str) -> None:
        n = self.found.get(kind, 0)
        self.found[kind] = n + 1
        if n < MAX_PER_KIND:
            self.problems.append(Problem(self.path, kind, message))

    def all_problems(self) -> list[Problem]:
        """This shard's problems, with a count line for each kind that had more than were listed."""
        more = [
            Problem(self.path, kind, f"... and {n - MAX_PER_KIND} more {kind} problem(s) like these")
            for kind, n in self.found.items()
            if n > MAX_PER_KIND
        ]
        return self.problems + more

    def check_schema(self, schema: pa.Schema) -> bool:
        """The one schema rule (shards.schema_problems), as the dataset applies it: required columns by name, others ignored."""
        problems = S.schema_problems(schema, self.seq_len, self.dtype)
        for p in problems:
            self.problem("schema", p)
        return not problems

    def batch(self, b: pa.RecordBatch) -> None:
        """Longer than 60 lines: every check of one record batch over the same offset arrays."""
        n, L = b.num_rows, self.seq_len
        row0 = self.rows
        self.rows += n
        cols = {name: b.column(name) for name in ("doc_lens", "doc_index", "doc_offset")}
        if self.deep:
            cols["input_ids"] = b.column("input_ids")
        for name, col in cols.items():
            if col.null_count:
                self.problem("nulls", f"column {name} holds {col.null_count} null(s) in rows {row0}..{row0 + n - 1}")
                return
            try:
                col.validate(full=name != "input_ids")  # offsets in bounds before numpy touches them
            except pa.ArrowInvalid as e:
                self.problem("unreadable", f"column {name}, rows {row0}..{row0 + n - 1}: {str(e).splitlines()[0]}")
                return

        offs, vals = [], []
        for name in ("doc_lens", "doc_index", "doc_offset"):
            arr = cols[name]
            o = np.asarray(arr.offsets, dtype=np.int64)
            vals.append(np.asarray(arr.values)[o[0] : o[-1]].astype(np.int64))
            offs.append(o - o[0])
        if not (np.array_equal(offs[0], offs[1]) and np.array_equal(offs[0], offs[2])):
            r = int(np.nonzero((offs[0] != offs[1]) | (offs[0] != offs[2]))[0][0]) - 1
            self.problem("pieces", f"row {row0 + max(r, 0)}: doc_lens, doc_index and doc_offset have different numbers of pieces")
            return
        o, plen, pdoc, poff = offs[0], vals[0], vals[1], vals[2]
        if len(plen) and plen.min() == 0:
            p = int(np.argmin(plen))
            r = int(np.searchsorted(o, p, side="right")) - 1
            self.problem("pieces", f"row {row0 + r}: a piece of 0 tokens (doc_index {pdoc[p]})")

        row_tok = S.row_used(o, plen)  # (n,) tokens in each row (the readers' arithmetic, packer/shards/checks.py)
        pieces = np.diff(o)
        over = np.nonzero(row_tok > L)[0]
        for r in over[:MAX_PER_KIND]:
            self.problem("row_overflow", f"row {row0 + r}: doc_lens sum to {row_tok[r]}, more than seq_len {L}")
        if len(over) > MAX_PER_KIND:
            self.found["row_overflow"] += len(over) - MAX_PER_KIND

        if self.deep:
            fsl = cols["input_ids"]
            ids = np.asarray(fsl.values[fsl.offset * L : (fsl.offset + n) * L])  # zero-copy view, (n * L,)
            if len(ids) and int(ids.max()) >= self.vocab:
                bad = np.flatnonzero(ids >= self.vocab)
                for i in bad[:MAX_PER_KIND]:
                    self.problem("token_range", f"row {row0 + i // L} slot {i % L}: token id {ids[i]} >= vocab_size {self.vocab}")
                if len(bad) > MAX_PER_KIND:
                    self.found["token_range"] += len(bad) - MAX_PER_KIND
            padded = np.nonzero(row_tok < L)[0]
            if len(padded):
                tails = ids.reshape(n, L)[padded]  # copy of the padded rows only
                wrong = (tails != self.pad_id) & (np.arange(L)[None, :] >= row_tok[padded][:, None])
                bad_rows = np.nonzero(wrong.any(axis=1))[0]
                for k in bad_rows[:MAX_PER_KIND]:
                    s = int(np.argmax(wrong[k]))
                    self.problem(
                        "padding",
                        f"row {row0 + padded[k]} slot {s}: id {tails[k, s]} after the row's {row_tok[padded[k]]} tokens, "
                        f"where pad_id {self.pad_id} belongs",
                    )
                if len(bad_rows) > MAX_PER_KIND:
                    self.found["padding"] += len(bad_rows) - MAX_PER_KIND
            got = loss_mask.scan_batch(self, b, row_tok, row0)
            if got is not None:
                self.trained = (self.trained or 0) + got

        fill = np.minimum(row_tok, L)
        self.padding += int((L - fill).sum())
        self.rep.row_tokens = added(self.rep.row_tokens, np.bincount(fill))  # as long as the fullest row, not seq_len
        self.rep.pieces_per_row = added(self.rep.pieces_per_row, np.bincount(pieces))
        self.piece_doc.append(pdoc)
        self.piece_off.append(poff)
        self.piece_len.append(plen)

    def finish(self, fig: ShardFigures) -> None:
        """Per-document checks over the whole shard; fill in ``fig``."""
        doc = np.concatenate(self.piece_doc) if self.piece_doc else np.zeros(0, np.int64)
        off = np.concatenate(self.piece_off) if self.piece_off else np.zeros(0, np.int64)
        ln = np.concatenate(self.piece_len) if self.piece_len else np.zeros(0, np.int64)
        self.piece_doc = self.piece_off = self.piece_len = []
        fig.rows, fig.pieces, fig.tokens, fig.padding = self.rows, len(ln), int(ln.sum()), self.padding
        fig.trained = self.trained
        if not len(doc):
            fig.documents = fig.documents_split = 0
            return
        top = int(doc.max())
        if top >= len(doc):
            # Indices are dense (0..documents-1, each with a piece): one past the
            # piece count is damage, and counting by it could ask for 32 GiB.
            self.problem("documents", f"doc_index {top} is past the shard's {len(doc):,} pieces (indices run 0..documents-1)")
            doc = np.unique(doc, return_inverse=True)[1].reshape(-1).astype(np.int64)
        count = np.bincount(doc)
        absent = np.nonzero(count == 0)[0]
        if len(absent):
            self.problem("documents", f"doc_index {absent[0]} has no piece ({len(absent)} such index(es) below the highest, {len(count) - 1})")
        lengths = np.zeros(len(count), dtype=np.int64)
        np.add.at(lengths, doc, ln)
        order = np.lexsort((off, doc))
        d, o, l_ = doc[order], off[order], ln[order]
        first = np.ones(len(d), dtype=bool)
        first[1:] = d[1:] != d[:-1]
        expect = np.zeros(len(d), dtype=np.int64)
        expect[1:] = o[:-1] + l_[:-1]
        expect[first] = 0
        torn = np.nonzero(o != expect)[0]
        for i in torn[:MAX_PER_KIND]:
            self.problem("documents", f"document {d[i]}: a piece starts at offset {o[i]}, but the pieces before it end at {expect[i]}")
        if len(torn) > MAX_PER_KIND:
            self.found["documents"] = self.found.get("documents", 0) + len(torn) - MAX_PER_KIND
        present = count > 0
        fig.documents = int(present.sum())
        fig.documents_split = int((count > 1).sum())
        self.rep.doc_lengths.add(lengths[present])


def added(total: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``total + counts``, the shorter padded with zeros (histograms that grow as values appear)."""
    if len(counts) > len(total):
        total = np.concatenate([total, np.zeros(len(counts) - len(total), np.int64)])
    total[: len(counts)] += counts
    return total


def scan_deep(scan: ShardScan, store: Storage, rel: str, entry: dict, fig: ShardFigures, on_bytes) -> list[Problem]:
    """Read the file once: hash every byte, parse the IPC stream inside it, check each batch.

    An IPC file is ``ARROW1\\0\\0``, an IPC stream (schema, batches, end marker),
    then a footer that indexes the batches. The stream is parsed as it is
    read (zero-copy from a memory map); the footer is opened afterwards to
    make sure a memory-mapping reader will find the same batches.
    """
    h = xxhash.xxh3_128()
    parsed, batches = False, 0
    try:
        mm = store.map(rel)  # a local file memory-mapped; an object fetched whole (one GET)
    except (OSError, ValueError) as e:  # ValueError: an empty file cannot be mapped
        scan.problem("unreadable", f"cannot read the file ({e})")
        return scan.all_problems()
    reader = MappedReader(mm, h, on_bytes)
    ipc = S.ipc_problems(mm)  # headers only: the magic, and no compressed body (the dataset maps shards in place)
    if bytes(reader.read(8)[:6]) != MAGIC:
        scan.problem("unreadable", "not an Arrow IPC file (no ARROW1 magic at the start)")
    elif ipc:
        scan.problem("unreadable", ipc[0])
    else:
        try:
            stream = S.stream_reader(pa.PythonFile(reader, mode="r"))
            if scan.check_schema(stream.schema):
                for batch in stream:
                    scan.batch(batch)
                    batches += 1
                parsed = True
            del stream
            batch = None
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError, ValueError) as e:
            scan.problem("unreadable", f"not a readable Arrow file ({str(e).splitlines()[0]})")
    while len(reader.read(BLOCK)):  # the footer, or whatever a failed parse left: the hash covers it all
        pass
    if parsed:
        try:
            n = S.file_reader(pa.py_buffer(mm)).num_record_batches  # reads the footer only
            if n != batches:
                scan.problem("unreadable", f"the Arrow footer indexes {n} record batches, the file holds {batches}")
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
            scan.problem("unreadable", f"the Arrow file footer is damaged ({str(e).splitlines()[0]})")
        scan.finish(fig)
    try:
        reader.release()
        if isinstance(mm, mmap.mmap):
            mm.close()
    except BufferError:  # an Arrow buffer still points into it: unmapped when that goes
        pass
    found = []
    if h.hexdigest() != entry[S.CHECKSUM]:
        found.append(Problem(scan.path, "checksum", f"{S.CHECKSUM} checksum mismatch: the file was changed or damaged"))
    return found + scan.all_problems()


def scan_shallow(scan: ShardScan, store: Storage, rel: str, size: int, fig: ShardFigures, on_bytes) -> list[Problem]:
    """Memory-map the file (ranged reads of an object) and read only the piece columns:
    no checksum, no token checks."""
    try:
        r = S.file_reader(store.arrow_map(rel))
        if scan.check_schema(r.schema):
            for i in range(r.num_record_batches):
                scan.batch(r.get_batch(i))
            scan.finish(fig)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        scan.problem("unreadable", f"not a readable Arrow file ({str(e).splitlines()[0]})")
    if on_bytes is not None:
        on_bytes(size)
    return scan.all_problems()
