"""A bucket unit (packer/repacking/bucket_unit.py): every document comes back from its bucket pieces plus the
dropped tail, each row one piece of exactly its bucket's length."""

from __future__ import annotations

import json
import os

import numpy as np

from packer.repacking import decompose

from ..conftest import read_documents
from ._bucketed import bucketed  # noqa: F401 (a fixture)


def test_every_document_is_recovered_from_its_pieces_and_the_dropped_tail(sample_build, bucketed):
    info = json.load(open(os.path.join(bucketed, "buckets.json")))
    docs, m = read_documents(sample_build)
    lo, hi = info["min"], info["max"]
    assert info["tokens"] == m["totals"]["tokens"] and info["padding"] == 0
    assert sum(b["tokens"] for b in info["buckets"]) + sum(d["tokens"] for d in info["dropped"].values()) == info["tokens"]
    # Per source shard: rebuild each document from the bucket rows, as decompose places them.
    rows = {b["length"]: _bucket_rows(os.path.join(bucketed, b["path"])) for b in info["buckets"]}
    first = 0
    dropped_tokens = 0
    for unit, sh in enumerate(m["shards"]):
        lengths = [len(d) for d in docs[first:first + sh["documents"]]]
        pieces, dropped = decompose(lengths, lo, hi)
        dropped_tokens += sum(d["tokens"] for d in dropped.values())
        rebuilt = [np.full(n, -1, np.int64) for n in lengths]
        for L, (ids, units) in rows.items():
            mine = ids[units == unit]
            doc, off = pieces.of(L)
            assert len(mine) == len(doc)
            for r, d, o in zip(mine, doc.tolist(), off.tolist()):
                rebuilt[d][o:o + L] = r
        for d, (want, got) in enumerate(zip(docs[first:first + sh["documents"]], rebuilt)):
            keep = (len(want) // hi) * hi + (len(want) % hi) // lo * lo
            assert (got[:keep] == want[:keep]).all() and (got[keep:] == -1).all(), (unit, d)
        first += sh["documents"]
    assert dropped_tokens == sum(d["tokens"] for d in info["dropped"].values())


def _bucket_rows(path):
    """(rows as (R, L) ids, the unit of each row) of one bucket, with pyarrow alone; checks each row is one piece."""
    import pyarrow as pa

    m = json.load(open(os.path.join(path, "manifest.json")))
    ids, units = [], []
    for sh in m["shards"]:
        t = pa.ipc.open_file(pa.memory_map(os.path.join(path, sh["path"]))).read_all()
        assert all(lens == [m["seq_len"]] for lens in t.column("doc_lens").to_pylist())  # one piece fills each row
        ids.append(t.column("input_ids").combine_chunks().flatten().to_numpy().reshape(-1, m["seq_len"]))
        units.append(np.full(sh["rows"], sh["unit"]))
    return np.concatenate(ids).astype(np.int64), np.concatenate(units)
