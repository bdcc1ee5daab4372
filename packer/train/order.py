"""An epoch's order over rows ``[0, n)``, in blocks that can be made one at a time.

Three orders, one interface (``bounds``: where each block starts in the order,
then ``n``; ``block(b)``: the rows at positions ``bounds[b]:bounds[b + 1]``,
int64; ``take(b, i, j, step)``: ``block(b)[i:j:step]``, made without the rest),
so a sampler holds one block at a time, whatever ``n``:

- ``Sequential``: rows in order, in blocks of ``CHUNK``.
- ``Fixed``: an order given whole, such as ``permuted``: one uniform permutation of all rows (one block; 8 bytes a row).
- ``ShardBlocks``: shards in a shuffled order, cut into blocks of about
  ``block_rows`` rows (whole shards), rows shuffled within each block. A
  reader then uses the same few shards row after row, instead of a new shard
  per row (a shard's first use in a process costs 2.3-2.5x a mapped read:
  docs/benchmarks.md); every row still comes once per epoch, and the order
  needs 32 bytes a shard plus one block, not 8 bytes a row (58 GB at the
  7.3 x 10^9 rows of a 15T-token build: docs/scale.md). What it gives up: rows
  of a block come from its shards only (about 64 shards of 64 MB at the
  default ``block_rows``), as in MosaicML streaming's block shuffles.

``order_for`` picks one. Each is a pure function of its seed key (a list of
ints, NumPy's ``SeedSequence``), the row count and the shard starts.
"""

from __future__ import annotations

import numpy as np
import xxhash

CHUNK = 1 << 20  # rows per block of the sequential order
_SHARDS, _ROWS = 11, 12  # tags of the two random streams of a block order


class Sequential:
    def __init__(self, n: int):
        self.n = n
        self.bounds = list(range(0, n, CHUNK)) + [n]

    def block(self, b: int) -> np.ndarray:
        return np.arange(self.bounds[b], self.bounds[b + 1], dtype=np.int64)

    def take(self, b: int, i: int, j: int | None, step: int = 1) -> np.ndarray:
        return self.block(b)[i:j:step]

    def digest(self) -> str:
        """xxh3_64 of the whole order's int64 bytes (one block at a time)."""
        h = xxhash.xxh3_64()
        for b in range(len(self.bounds) - 1):
            h.update(self.block(b).tobytes())
        return h.hexdigest()


class Fixed:
    """An order given as an array (one block): a permutation, or a mix of builds made whole."""

    def __init__(self, rows: np.ndarray):
        self.rows, self.n, self.bounds = rows.astype(np.int64, copy=False), len(rows), [0, len(rows)]

    def block(self, b: int) -> np.ndarray:
        return self.rows

    def take(self, b: int, i: int, j: int | None, step: int = 1) -> np.ndarray:
        return self.rows[i:j:step]

    def digest(self) -> str:
        return xxhash.xxh3_64_hexdigest(self.rows.tobytes())


def permuted(key: list[int], n: int) -> Fixed:
    """One uniform permutation of all rows (8 bytes a row)."""
    return Fixed(np.random.default_rng(key).permutation(n))


class ShardBlocks:
    """``starts``: (S,) int64, each shard's first row (ascending, ``starts[0] == 0``)."""

    def __init__(self, key: list[int], starts: np.ndarray, n: int, block_rows: int):
        self.key, self.n = key, n
        rows = np.diff(np.append(starts, n))
        self.perm = np.random.default_rng(key + [_SHARDS]).permutation(len(starts))
        self.starts, self.rows = starts[self.perm], rows[self.perm]  # in the shuffled order
        first = np.cumsum(self.rows) - self.rows  # each shard's first position in the epoch order
        # A block is the shards whose first row falls in one stretch of block_rows positions.
        self.cut = np.append(np.flatnonzero(np.diff(first // block_rows, prepend=-1)), len(starts))
        self.bounds = np.append(first[self.cut[:-1]], n).tolist()
        self._last: tuple = (-1, None)  # the last block's permutation (a sampler reads one block at a time)

    def block(self, b: int) -> np.ndarray:
        return self.take(b, 0, None)

    def take(self, b: int, i: int, j: int | None, step: int = 1) -> np.ndarray:
        """Rows at places ``i:j:step`` of block b: of the block's permutation, only those places are
        turned into rows (a rank of W maps 1/W of the block)."""
        if self._last[0] != b:
            self._last = b, np.random.default_rng(self.key + [_ROWS, b]).permutation(self.bounds[b + 1] - self.bounds[b])
        p = self._last[1][i:j:step]  # places among the block's rows, taken shard after shard
        a, z = self.cut[b], self.cut[b + 1]
        lens, m = self.rows[a:z], len(self._last[1])
        ends = np.cumsum(lens)
        if 8 * len(p) > m:  # most places: the block's rows laid out once are cheaper than a search per place
            return (np.repeat(self.starts[a:z] - (ends - lens), lens) + np.arange(m, dtype=np.int64))[p]
        s = np.searchsorted(ends, p, "right")  # the shard each place falls in
        return self.starts[a:z][s] + p - (ends - lens)[s]

    def digest(self) -> str:
        """Of the shard order, the cuts and the first block: what depends on the data, seed and NumPy."""
        h = xxhash.xxh3_64(self.perm.astype(np.int64).tobytes())
        h.update(self.cut.astype(np.int64).tobytes())
        h.update(self.block(0).tobytes() if len(self.cut) > 1 else b"")
        return h.hexdigest()


def order_for(key: list[int], n: int, starts: np.ndarray | None, block_rows: int | None, shuffle: bool = True):
    """The order of rows [0, n): sequential without ``shuffle``; else blocks of shards where
    ``block_rows`` is set, the shards are known and there are more than ``block_rows`` rows; else one
    permutation (the order of packer before shard blocks, so runs on builds of up to ``block_rows`` rows
    keep their order)."""
    if not shuffle:
        return Sequential(n)
    if block_rows is None or starts is None or n <= block_rows or len(starts) < 2:
        return permuted(key, n)
    return ShardBlocks(key, np.asarray(starts, np.int64), n, block_rows)


def positions(order, lo: int, hi: int, step: int = 1):
    """Rows at positions lo, lo + step, ... < hi of ``order``, one block's array at a time."""
    for b in range(len(order.bounds) - 1):
        a, z = order.bounds[b], order.bounds[b + 1]
        if z <= lo or a >= hi:
            continue
        first = lo + -(-(max(a, lo) - lo) // step) * step  # first position >= a on the stride
        if first < min(z, hi):
            yield order.take(b, first - a, min(z, hi) - a, step)
