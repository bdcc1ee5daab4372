"""The optional ``loss_mask`` column (chat builds) in ``packer stats``: checked, and its trained share counted.

A verifying read checks, per record batch, that the column has the type
docs/format.md gives (fixed_size_list<uint8>[seq_len]), that every value is
0 or 1, and that no padding slot is trained; the trained slots of a shard
must sum to its manifest entry's ``trained_tokens``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import shards as S


def scan_batch(scan, b: pa.RecordBatch, row_tok: np.ndarray, row0: int) -> int | None:
    """Check batch ``b``'s loss_mask (if it has one); return its trained slots, or None without a column.

    ``row_tok`` is (rows,) tokens in each row (slots after them are padding).
    """
    i = b.schema.get_field_index(S.LOSS_MASK)
    if i < 0:
        return None
    L, n = scan.seq_len, b.num_rows
    col = b.column(i)
    if not col.type.equals(S.loss_mask_type(L)):
        scan.problem("schema", f"column {S.LOSS_MASK} is {col.type}, not {S.loss_mask_type(L)}")
        return 0
    m = np.asarray(col.values[col.offset * L : (col.offset + n) * L]).reshape(n, L)
    if len(m) and m.max() > 1:
        r = int(np.argmax((m > 1).any(axis=1)))
        scan.problem("loss_mask", f"row {row0 + r}: loss_mask holds a value other than 0 and 1")
    pad = np.arange(L)[None, :] >= row_tok[:, None]
    bad = np.nonzero((m.astype(bool) & pad).any(axis=1))[0]
    for r in bad[:3]:
        scan.problem("loss_mask", f"row {row0 + r}: a padding slot is marked trained in loss_mask")
    return int(m.sum(dtype=np.int64))


def shard_problems(fig, entry: dict) -> list[tuple[str, str]]:
    """(kind, message) for the shard's trained slots against its manifest entry (after a full read)."""
    want = entry.get("trained_tokens")
    if want is None:
        return []
    if fig.trained is None:
        return [("schema", f"column {S.LOSS_MASK} is missing (the manifest counts {want:,} trained tokens)")]
    if fig.trained != want:
        return [("count", f"trained_tokens: {fig.trained:,} in the shard's loss_mask, the manifest says {want:,}")]
    return []


def figures(m: dict, shards) -> dict:
    """{"trained_tokens", "trained_pct"} of a chat build ({} for others): measured where every shard was read."""
    if S.LOSS_MASK not in m.get("columns", []):
        return {}
    if shards.trained_all:  # (a ShardLog: every shard's loss_mask was read)
        trained = shards.trained
    else:
        trained = m["totals"].get("trained_tokens")
    tokens = m["totals"].get("tokens") or 0
    return {"trained_tokens": trained,
            "trained_pct": round(100.0 * trained / tokens, 4) if tokens and trained is not None else None}
