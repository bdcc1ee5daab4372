"""The values ``packer stats`` produces: problems found, exact distributions, per-shard figures, the report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np


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
    "index": "index.arrow is damaged or disagrees with the manifest's totals (readers use the manifest instead)",
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
        other = Dist()
        other.values, c = np.unique(np.asarray(samples, dtype=np.int64), return_counts=True)
        other.counts = c.astype(np.int64)
        self.merge(other)

    def merge(self, other: "Dist") -> None:
        """Add the samples of ``other`` (as ``add`` of them would)."""
        if not len(other.values):
            return
        allv = np.concatenate([self.values, other.values])
        allc = np.concatenate([self.counts, other.counts])
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


class ShardLog:
    """The shards' figures, in manifest order, in constant memory: their sums kept, each shard's row
    (path, unit, bytes, rows, tokens, documents: the --json "shards" list) spooled to a temporary file
    256 at a time and read back by iterating (``ShardFigures`` of those fields)."""

    ROW = ("path", "unit", "bytes", "rows", "tokens", "documents")
    SUMS = ("rows", "tokens", "pieces", "documents", "documents_split", "padding")

    def __init__(self):
        self.n = self.measured = self.trained = 0
        self.trained_all = True  # every shard's loss_mask read (chat builds, verifying reads)
        self.sums = dict.fromkeys(self.SUMS, 0)  # over the measured shards
        self.tokens_min = self.tokens_max = None
        self.pending: list[ShardFigures] = []
        self._spool = None

    def add(self, s: ShardFigures) -> None:
        self.n += 1
        if s.documents is not None:
            self.measured += 1
            for k in self.SUMS:
                self.sums[k] += getattr(s, k)
            self.tokens_min = s.tokens if self.tokens_min is None else min(self.tokens_min, s.tokens)
            self.tokens_max = s.tokens if self.tokens_max is None else max(self.tokens_max, s.tokens)
        if s.trained is None:
            self.trained_all = False
        else:
            self.trained += s.trained
        self.pending.append(s)
        if len(self.pending) >= 256:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            if self._spool is None:
                import tempfile

                self._spool = tempfile.TemporaryFile("w+", encoding="utf-8", prefix="packer-stats-")
            self._spool.writelines(json.dumps([getattr(s, k) for k in self.ROW]) + "\n" for s in self.pending)
            self.pending = []

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        self._flush()
        if self._spool is not None:
            self._spool.seek(0)
            for line in self._spool:
                yield ShardFigures(**dict(zip(self.ROW, json.loads(line))))
            self._spool.seek(0, 2)  # (more may be added after)


@dataclass
class Report:
    """The outcome of ``check``: problems plus everything measured."""

    out: str
    manifest: dict  # without its shard list (the entries are read a slice at a time)
    deep: bool
    problems: list[Problem] = field(default_factory=list)
    shards: ShardLog = field(default_factory=ShardLog)
    doc_lengths: Dist = field(default_factory=Dist)
    row_tokens: np.ndarray | None = None  # row_tokens[k] = rows holding k tokens, k = 0..(the fullest row)
    pieces_per_row: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    bytes_read: int = 0
    holdout_shards: int = 0  # shards of the holdout build inside this one, checked with it

    @property
    def checked_shards(self) -> int:
        """Every shard checked: this build's and its holdout's."""
        return len(self.shards) + self.holdout_shards

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem_lines(self) -> list[str]:
        return [str(p) for p in self.problems]
