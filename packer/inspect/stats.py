"""Stats: verify a build against its manifest and measure what it holds.

``check(out)`` reads every shard once, front to back, and in that one pass

- hashes the file (xxh3_128) as the bytes arrive,
- parses them as an Arrow IPC stream (the body of an IPC file is one) and
  checks every record batch: token ids ``< vocab_size``, each row's
  ``doc_lens`` summing to at most ``seq_len`` with the rest ``pad_id``,
  pieces that tile their documents,
- counts rows, tokens, pieces, documents and padding for the comparison with
  the manifest and for the statistics.

Memory is one record batch (1024 rows) plus one shard's piece table (three
int64 per piece: a few MB for a 64 MB unit) plus exact distributions whose
size depends on the number of *distinct* values, never on the build's size.

With ``deep=False`` (``packer stats --no-verify``) the token column is not
read at all: shards are memory-mapped and only the small piece columns are
touched, so the statistics cost a few percent of a full read.

Problems are collected, never raised: one ``Problem`` per finding, naming the
file. ``ShardError`` is raised only when the manifest itself cannot be read.
"""

from __future__ import annotations

import json
import mmap
import os
import posixpath
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import xxhash

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import Storage, storage_for
from . import loss_mask

STATS_VERSION = 1  # of the --json document, see docs/stats.md
PERCENTILES = (50, 90, 99)
MAGIC = b"ARROW1"
BLOCK = 8 << 20  # reads of the footer tail; batches are read message by message
MAX_PER_KIND = 3  # per shard and kind of problem: the first few, then a count


@dataclass(frozen=True)
class Problem:
    """One finding. ``path`` is relative to the build folder ("" for the manifest as a whole)."""

    path: str
    kind: str  # see KINDS
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


KINDS = {
    "missing": "a shard the manifest names does not exist",
    "size": "the file size differs from the manifest (truncated, grown or replaced)",
    "checksum": "the xxh3_128 of the file differs from the manifest",
    "unreadable": "not a readable Arrow IPC file",
    "schema": "a column is missing or has the wrong type, seq_len or dtype",
    "nulls": "a column holds nulls",
    "token_range": "a token id is >= vocab_size",
    "row_overflow": "a row's doc_lens sum to more than seq_len",
    "padding": "a slot after a row's pieces does not hold pad_id",
    "pieces": "doc_lens/doc_index/doc_offset disagree, or a piece is empty",
    "documents": "a document's pieces do not tile it, or a document index has no piece",
    "count": "a count measured in a shard differs from its manifest entry",
    "totals": "the manifest's totals differ from the sum of its shard entries",
    "manifest": "the manifest contradicts itself (dtype too narrow for the vocabulary, path outside the build)",
    "extra": "a file in the build folder that the manifest does not account for",
}


class Dist:
    """An exact distribution of non-negative integers: sorted distinct values and their counts.

    Memory is two int64 per distinct value, so document lengths of any number
    of documents cost at most a few MB (lengths are bounded by the corpus).
    """

    def __init__(self):
        self.values = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)

    def add(self, samples: np.ndarray) -> None:
        if not len(samples):
            return
        v, c = np.unique(np.asarray(samples, dtype=np.int64), return_counts=True)
        allv = np.concatenate([self.values, v])
        allc = np.concatenate([self.counts, c.astype(np.int64)])
        self.values, inv = np.unique(allv, return_inverse=True)
        self.counts = np.zeros(len(self.values), dtype=np.int64)
        np.add.at(self.counts, inv, allc)

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def percentile(self, p: float) -> int | None:
        """Nearest rank: the smallest value with at least p% of the samples at or below it."""
        n = self.n
        if n == 0:
            return None
        rank = max(1, int(np.ceil(p / 100.0 * n)))
        return int(self.values[np.searchsorted(np.cumsum(self.counts), rank)])

    def mean(self) -> float | None:
        n = self.n
        return float((self.values * self.counts).sum() / n) if n else None


@dataclass
class ShardFigures:
    """What was measured in one shard (None where the shard could not be read)."""

    path: str
    unit: int | None
    bytes: int | None = None
    rows: int | None = None
    tokens: int | None = None
    pieces: int | None = None
    documents: int | None = None
    documents_split: int | None = None
    padding: int | None = None
    trained: int | None = None  # slots the loss_mask trains on (chat builds, read in full), else None


@dataclass
class Report:
    """The outcome of ``check``: problems plus everything measured."""

    out: str
    manifest: dict
    deep: bool
    problems: list[Problem] = field(default_factory=list)
    shards: list[ShardFigures] = field(default_factory=list)
    doc_lengths: Dist = field(default_factory=Dist)
    row_tokens: np.ndarray | None = None  # row_tokens[k] = rows holding k tokens, k = 0..seq_len
    pieces_per_row: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    bytes_read: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem_lines(self) -> list[str]:
        return [str(p) for p in self.problems]


# --------------------------------------------------------------------------
# One pass over one shard.


class _MappedReader:
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


class _ShardScan:
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

        cs = np.zeros(len(plen) + 1, dtype=np.int64)
        np.cumsum(plen, out=cs[1:])
        row_tok = cs[o[1:]] - cs[o[:-1]]  # (n,) tokens in each row
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
        self.rep.row_tokens += np.bincount(fill, minlength=L + 1)
        ppr = np.bincount(pieces)
        if len(ppr) > len(self.rep.pieces_per_row):
            self.rep.pieces_per_row = np.concatenate(
                [self.rep.pieces_per_row, np.zeros(len(ppr) - len(self.rep.pieces_per_row), np.int64)]
            )
        self.rep.pieces_per_row[: len(ppr)] += ppr
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


def _scan_deep(scan: _ShardScan, store: Storage, rel: str, entry: dict, fig: ShardFigures, on_bytes) -> list[Problem]:
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
    reader = _MappedReader(mm, h, on_bytes)
    ipc = S.ipc_problems(mm)  # headers only: the magic, and no compressed body (the dataset maps shards in place)
    if bytes(reader.read(8)[:6]) != MAGIC:
        scan.problem("unreadable", "not an Arrow IPC file (no ARROW1 magic at the start)")
    elif ipc:
        scan.problem("unreadable", ipc[0])
    else:
        try:
            stream = pa.ipc.open_stream(pa.PythonFile(reader, mode="r"))
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
            n = pa.ipc.open_file(pa.py_buffer(mm)).num_record_batches  # reads the footer only
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


def _scan_shallow(scan: _ShardScan, store: Storage, rel: str, size: int, fig: ShardFigures, on_bytes) -> list[Problem]:
    """Memory-map the file (ranged reads of an object) and read only the piece columns:
    no checksum, no token checks."""
    try:
        r = pa.ipc.open_file(store.arrow_map(rel))
        if scan.check_schema(r.schema):
            for i in range(r.num_record_batches):
                scan.batch(r.get_batch(i))
            scan.finish(fig)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        scan.problem("unreadable", f"not a readable Arrow file ({str(e).splitlines()[0]})")
    if on_bytes is not None:
        on_bytes(size)
    return scan.all_problems()


# --------------------------------------------------------------------------
# The whole build.

_COUNTS = ("rows", "tokens", "pieces", "documents", "documents_split", "padding")


def _need(m: dict, out: str, *keys):
    path = os.path.join(out, S.MANIFEST)
    cur = m
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            raise ShardError(f"{path}: manifest lacks {'.'.join(map(str, keys))!r}")
        cur = cur[k]
    return cur


def check(out: str, deep: bool = True, progress=None) -> Report:
    """Verify the build in ``out`` (a folder, or a URI prefix such as
    ``s3://bucket/out``) and measure it.

    ``deep``: read every byte (checksums, token ids, padding); otherwise read
    only the piece columns. ``progress(nbytes)`` is called as shard bytes are
    read. Raises ``ShardError`` only for an unreadable manifest. A remote
    shard is fetched whole into memory to be verified (one GET per shard).
    """
    store = storage_for(out)
    m = S.read_manifest(store)
    objects = store.list()  # {rel: size}, one listing for the whole build
    seq_len, dtype = int(_need(m, out, "seq_len")), str(_need(m, out, "dtype"))
    vocab = int(m.get("vocab_size", _need(m, out, "tokenizer", "vocab_size")))
    pad_id = int(m.get("pad_id", _need(m, out, "tokenizer", "pad_id")))
    entries = _need(m, out, "shards")
    for i, e in enumerate(entries):
        for k in ("path", "bytes", S.CHECKSUM) + _COUNTS:
            if k not in e:
                raise ShardError(f"{os.path.join(out, S.MANIFEST)}: shard entry {i} lacks {k!r}")
    rep = Report(out, m, deep)
    rep.row_tokens = np.zeros(seq_len + 1, dtype=np.int64)
    if dtype not in ("uint16", "uint32") or np.iinfo(np.dtype(dtype)).max < vocab - 1:
        rep.problems.append(Problem("", "manifest", f"manifest: dtype {dtype} cannot hold token ids below vocab_size {vocab}"))
    _check_totals(rep, m, entries)

    for e in entries:
        rel = e["path"]
        fig = ShardFigures(rel, e.get("unit"))
        rep.shards.append(fig)
        if not store.inside(rel):
            rep.problems.append(Problem(str(rel), "manifest", "shard path points outside the build folder"))
            continue
        size = objects.get(posixpath.normpath(rel))
        if size is None:
            rep.problems.append(Problem(rel, "missing", "missing: the manifest names it but there is no such file"))
            continue
        fig.bytes = size
        if size != e["bytes"]:
            what = "truncated" if size < e["bytes"] else "longer than written"
            rep.problems.append(Problem(rel, "size", f"{size:,} bytes, the manifest says {e['bytes']:,} ({what})"))
            if progress is not None:
                progress(e["bytes"])
            continue
        scan = _ShardScan(rep, rel, seq_len, dtype, vocab, pad_id, deep)
        if deep:
            rep.problems.extend(_scan_deep(scan, store, rel, e, fig, progress))
            rep.bytes_read += size
        else:
            rep.problems.extend(_scan_shallow(scan, store, rel, size, fig, progress))
        if fig.rows is not None and fig.documents is not None:
            if deep:
                rep.problems.extend(Problem(rel, kind, msg) for kind, msg in loss_mask.shard_problems(fig, e))
            for k in _COUNTS:
                got, want = getattr(fig, k), e[k]
                if got != want:
                    rep.problems.append(Problem(rel, "count", f"{k}: {got:,} in the shard, the manifest says {want:,}"))
    held = m.get("holdout")
    if isinstance(held, dict) and isinstance(held.get("path"), str):
        # The holdout split is a build of its own inside this one: check it as one, name its problems by its folder.
        sub = held["path"].strip("/")
        objects = {k: v for k, v in objects.items() if not k.startswith(sub + "/")}
        try:
            hrep = check(out.rstrip("/") + "/" + sub, deep, progress)
            rep.problems.extend(Problem(f"{sub}/{p.path}" if p.path else sub, p.kind, p.message) for p in hrep.problems)
            rep.bytes_read += hrep.bytes_read
        except ShardError as e:
            rep.problems.append(Problem(sub, "missing", f"holdout build: {e}"))
    rep.problems.extend(_extra_files(entries, objects))
    return rep


def verify(out: str) -> Report:
    """``check`` with every byte read (what ``packer stats`` does by default)."""
    return check(out, deep=True)


def _check_totals(rep: Report, m: dict, entries: list[dict]) -> None:
    t = m["totals"]
    sums = {k: sum(int(e[k]) for e in entries) for k in _COUNTS}
    sums["slots"] = sums["rows"] * m["seq_len"]
    for k, v in sums.items():
        if k in t and t[k] != v:
            rep.problems.append(Problem("manifest.json", "totals", f"totals.{k} is {t[k]:,}, its shard entries sum to {v:,}"))


def _extra_files(entries: list[dict], objects: dict[str, int]) -> list[Problem]:
    """Files of the build (``objects``: its listing) that the manifest does not account for.
    Names are compared "/"-separated, as the manifest and object keys write them."""
    known = {S.MANIFEST, "build.json"}
    for e in entries:
        known.add(posixpath.normpath(e["path"]))
        if e.get("unit") is not None:
            known.add(f"{S.UNIT_DIR}/{int(e['unit']):06d}.json")
    rels = sorted(objects)
    found = []
    for rel in rels:
        if rel not in known:
            why = "a temp file of an interrupted write" if posixpath.basename(rel).startswith(".tmp-") else "not in the manifest"
            found.append(Problem(rel, "extra", f"extra file: {why}"))
    return found


# --------------------------------------------------------------------------
# Figures: one dict (the --json document) and a table made from it.


def figures(rep: Report) -> dict:
    """The statistics as plain JSON types; the schema is docs/stats.md."""
    m = rep.manifest
    t = m.get("totals", {})
    seq_len = m["seq_len"]
    measured = [s for s in rep.shards if s.documents is not None]
    complete = len(measured) == len(rep.shards)

    def total(k):  # measured when every shard was read, else the manifest's figure
        return sum(getattr(s, k) for s in measured) if complete else t.get(k)

    rows = total("rows")
    slots = rows * seq_len if rows is not None else None
    padding = total("padding")
    rt = rep.row_tokens if rep.row_tokens is not None else np.zeros(seq_len + 1, np.int64)
    nrows = int(rt.sum())
    fill_pct = np.arange(seq_len + 1) * 100.0 / seq_len
    ppr = rep.pieces_per_row
    dl = rep.doc_lengths
    skipped = t.get("skipped", {})
    tok_per_shard = [s.tokens for s in measured]
    return {
        "stats_version": STATS_VERSION,
        "build": rep.out,
        "verified": rep.deep,
        "ok": rep.ok,
        "problems": [{"path": p.path, "kind": p.kind, "message": p.message} for p in rep.problems],
        "measured_from": "shards" if complete else "manifest",
        "shards_measured": len(measured),
        "seq_len": seq_len,
        "dtype": m["dtype"],
        "tokenizer": m["tokenizer"],
        "settings": m.get("settings", {}),
        "documents": total("documents"),
        "tokens": total("tokens"),
        "rows": rows,
        "slots": slots,
        "padding": padding,
        "padding_pct": round(100.0 * padding / slots, 4) if slots else 0.0,
        "pieces": total("pieces"),
        "documents_split": total("documents_split"),
        "pieces_per_row": {
            "mean": round(float((np.arange(len(ppr)) * ppr).sum() / nrows), 4) if nrows else None,
            "max": int(np.nonzero(ppr)[0][-1]) if ppr.any() else None,
            "histogram": {str(k): int(v) for k, v in enumerate(ppr) if v},
        },
        "row_fill": {
            "full_rows": int(rt[seq_len]),
            "mean_pct": round(float((fill_pct * rt).sum() / nrows), 4) if nrows else None,
            "min_pct": round(float(fill_pct[np.nonzero(rt)[0][0]]), 4) if nrows else None,
            "histogram_pct": _fill_histogram(rt, seq_len),
        },
        "doc_length": {
            "exact": True,
            "documents": dl.n,
            "min": int(dl.values[0]) if dl.n else None,
            "mean": round(dl.mean(), 2) if dl.n else None,
            **{f"p{p}": dl.percentile(p) for p in PERCENTILES},
            "max": int(dl.values[-1]) if dl.n else None,
        },
        **loss_mask.figures(m, rep.shards),
        "holdout": m.get("holdout"),
        "skipped": dict(skipped),
        "skipped_total": int(sum(skipped.values())),
        "skipped_examples": t.get("skipped_examples", {}),
        "tokens_per_shard": {
            "min": min(tok_per_shard) if tok_per_shard else None,
            "mean": round(sum(tok_per_shard) / len(tok_per_shard), 1) if tok_per_shard else None,
            "max": max(tok_per_shard) if tok_per_shard else None,
        },
        "shards": [
            {"path": s.path, "unit": s.unit, "bytes": s.bytes, "rows": s.rows, "tokens": s.tokens, "documents": s.documents}
            for s in rep.shards
        ],
    }


def _fill_histogram(rt: np.ndarray, seq_len: int) -> dict:
    """Rows by fill, in 10% bins: "90-100" holds fills in [90%, 100%); "100" full rows."""
    out = {}
    if not rt.any():
        return out
    k = np.arange(seq_len + 1)
    bins = np.minimum(k * 10 // seq_len, 10)
    counts = np.bincount(bins, weights=rt, minlength=11).astype(np.int64)
    for b in range(10):
        out[f"{b * 10}-{b * 10 + 10}"] = int(counts[b])
    out["100"] = int(counts[10])
    return out


def table_lines(fig: dict) -> list[str]:
    """A readable table of ``figures()``."""
    tok = fig["tokenizer"]
    st = fig["settings"]
    dl = fig["doc_length"]
    tps = fig["tokens_per_shard"]
    pr = fig["pieces_per_row"]
    rf = fig["row_fill"]

    def n(x):
        return "-" if x is None else f"{x:,}"

    eos = "no EOS" if tok.get("eos_id") is None else f"eos {tok['eos_id']}"
    lines = [
        f"documents        {n(fig['documents'])}",
        f"tokens           {n(fig['tokens'])}",
        f"rows             {n(fig['rows'])} x {fig['seq_len']} ({fig['dtype']})",
        f"padding          {n(fig['padding'])} slots ({fig['padding_pct']:.3f}%)",
        f"documents split  {n(fig['documents_split'])}",
        *([f"trained tokens   {n(fig['trained_tokens'])} ({fig['trained_pct']}% of tokens: the loss_mask)"]
          if "trained_tokens" in fig else []),
        f"pieces per row   mean {pr['mean']}, max {pr['max']}" if pr["mean"] is not None else "pieces per row   -",
        f"row fill         mean {rf['mean_pct']}%, min {rf['min_pct']}%, {n(rf['full_rows'])} rows full"
        if rf["mean_pct"] is not None else "row fill         -",
        f"doc length       p50 {n(dl['p50'])}  p90 {n(dl['p90'])}  p99 {n(dl['p99'])}  max {n(dl['max'])} tokens (exact)",
        f"shards           {len(fig['shards'])}, tokens per shard min {n(tps['min'])} / mean {n(tps['mean'])} / max {n(tps['max'])}",
        f"tokenizer        {tok['name']} ({tok['kind']}, vocab {tok['vocab_size']}, {eos}, pad {tok['pad_id']})",
    ]
    if st:
        lines.append(f"settings         pack {st.get('pack')}, eos {st.get('eos')}, text_field {st.get('text_field')}, "
                     f"unit_bytes {n(st.get('unit_bytes'))}")
    if fig.get("holdout"):
        h = fig["holdout"]
        lines.append(f"holdout          {n(h.get('documents'))} documents, {n(h.get('tokens'))} tokens, {n(h.get('rows'))} rows "
                     f"in {h.get('path')}/ (fraction {h.get('fraction')})")
    if fig["skipped_total"]:
        lines.append(f"skipped          {fig['skipped_total']:,} record(s):")
        for reason, k in fig["skipped"].items():
            ex = ", ".join(fig["skipped_examples"].get(reason, [])[:3])
            lines.append(f"  {reason:<15}{k:>8,}   e.g. {ex}")
    else:
        lines.append("skipped          0 records")
    if fig["measured_from"] == "manifest":
        lines.append("note             some shards could not be read: totals are the manifest's")
    return lines


def summary_lines(m: dict) -> list[str]:
    """The manifest's own figures (the end-of-build summary; nothing is read)."""
    t = m["totals"]
    tok = m["tokenizer"]
    lines = [
        f"documents       {t['documents']:,}",
        f"tokens          {t['tokens']:,}",
        f"rows            {t['rows']:,} x {m['seq_len']} ({m['dtype']})",
        f"padding         {t['padding']:,} slots ({t['padding_pct']:.3f}%)",
        f"documents split {t['documents_split']:,}",
        *([f"trained tokens  {t['trained_tokens']:,} ({t['trained_pct']}% of tokens: the loss_mask)"]
          if "trained_tokens" in t else []),
        *([f"truncated       {t['truncated']:,} conversation(s) cut to seq_len"] if t.get("truncated") else []),
        f"shards          {len(m['shards'])}",
        f"tokenizer       {tok['name']} ({tok['kind']}, vocab {tok['vocab_size']}, eos {tok['eos_id']}, pad {tok['pad_id']})",
    ]
    h = m.get("holdout")
    if h:
        lines.append(f"holdout         {h['documents']:,} documents, {h['tokens']:,} tokens, {h['rows']:,} "
                     f"{'row' if h['rows'] == 1 else 'rows'} in {h['path']}/ (fraction {h['fraction']})")
    skipped = t.get("skipped", {})
    if skipped:
        lines.append(f"skipped         {sum(skipped.values()):,} record(s):")
        for reason, n in skipped.items():
            ex = ", ".join(t.get("skipped_examples", {}).get(reason, [])[:3])
            lines.append(f"  {reason:<14}{n:>8,}   e.g. {ex}")
    else:
        lines.append("skipped         0 records")
    if tok.get("added"):
        lines.append(f"around text     {tok['added']}")
    specials = t.get("special_in_text", {})
    if specials:  # not skipped: encoded, but a special id in the middle of a document
        lines.append(f"special tokens  {sum(specials.values()):,} document(s) hold a special token's string, encoded as "
                     "its special id (--split-special-tokens: as plain text):")
        for token, n in specials.items():
            ex = ", ".join(t.get("special_in_text_examples", {}).get(token, [])[:3])
            lines.append(f"  {token:<14}{n:>8,}   e.g. {ex}")
    return lines


def to_json(fig: dict) -> str:
    return json.dumps(fig, indent=1)


# --------------------------------------------------------------------------
# --plot (matplotlib is an optional extra).


def require_matplotlib():
    """Return matplotlib's Figure class, or raise a one-line ``PackerError`` saying how to get it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PackerError("--plot needs matplotlib, which is not installed: pip install 'packer[plot]'") from None
    return Figure


def plot(rep: Report, path: str) -> None:
    """Write a PNG: document lengths (log-log histogram) and rows by fill."""
    Figure = require_matplotlib()
    fig = Figure(figsize=(11, 4), dpi=100)
    a, b = fig.subplots(1, 2)
    dl = rep.doc_lengths
    if dl.n:
        hi = max(2, int(dl.values[-1]))
        bins = np.unique(np.geomspace(1, hi + 1, 60).astype(np.int64))
        a.hist(dl.values, bins=bins, weights=dl.counts, color="#4c72b0")
        for p, style in zip(PERCENTILES, (":", "--", "-.")):
            v = dl.percentile(p)
            a.axvline(v, color="k", linestyle=style, linewidth=1, label=f"p{p} = {v:,}")
        sl = int(rep.manifest.get("seq_len", 0))
        if sl:  # a document longer than this is split across rows
            a.axvline(sl, color="#c44e52", linewidth=1.5, label=f"seq_len = {sl:,}")
        a.set_xscale("log")
        a.set_yscale("log")
        a.legend(fontsize=8)
    a.set_xlabel("document length (tokens, log)")
    a.set_ylabel("documents (log)")
    a.set_title(f"{dl.n:,} documents")
    rt = rep.row_tokens if rep.row_tokens is not None else np.zeros(1, np.int64)
    seq_len = len(rt) - 1
    if rt.any():
        fill = np.arange(seq_len + 1) * 100.0 / max(1, seq_len)
        b.hist(fill, bins=np.linspace(0, 100, 51), weights=rt, color="#55a868")
        b.set_yscale("log")
        lowest = float(fill[np.nonzero(rt)[0][0]])  # show the fills there are, not an empty 0-60% axis
        b.set_xlim(max(0.0, np.floor(lowest / 10) * 10 - 2), 101)
    b.set_xlabel(f"row fill (% of {seq_len} slots)")
    b.set_ylabel("rows (log)")
    pad = 100.0 * float(((seq_len - np.arange(seq_len + 1)) * rt).sum()) / max(1, int(rt.sum()) * seq_len)
    b.set_title(f"{int(rt.sum()):,} rows, {pad:.3f}% padding")
    fig.suptitle(os.path.basename(os.path.normpath(rep.out)) + f" (seq_len {seq_len})")
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise PackerError(f"cannot write plot {path}: {e.strerror or e}") from None
