"""packer repack --buckets: dataset decomposition into power-of-two length buckets (packer/repacking/buckets.py)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from packer import repack
from packer.errors import PackerError
from packer.repacking import decompose, parse_buckets

from ..conftest import invoke, read_documents


@pytest.fixture(scope="module")
def bucketed(sample_build, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("buckets") / "outb")
    repack(sample_build, out, buckets=(256, 8192), workers=1, quiet=True)
    return out


def test_decompose_is_the_binary_expansion():
    p, dropped = decompose([5, 300, 1000, 20000], 256, 8192)
    got = sorted(zip(p.doc.tolist(), p.offset.tolist(), p.length.tolist()))
    assert got == [(1, 0, 256), (2, 0, 512), (2, 512, 256), (3, 0, 8192), (3, 8192, 8192), (3, 16384, 2048),
                   (3, 18432, 1024), (3, 19456, 512)]
    assert dropped == {"document_under_min": {"documents": 1, "tokens": 5},
                       "tail_under_min": {"documents": 3, "tokens": 44 + 232 + 32}}
    rng = np.random.default_rng(0)
    n = rng.integers(1, 40000, 500)
    p, dropped = decompose(n, 64, 4096)
    assert set(p.length.tolist()) <= {64 << k for k in range(7)}
    assert int(p.length.sum()) + sum(d["tokens"] for d in dropped.values()) == int(n.sum())
    assert (np.lexsort((p.offset, p.doc, p.length)) == np.arange(len(p.doc))).all()  # sorted, deterministic


def test_parse_buckets_refuses_what_is_not_two_powers_of_two():
    assert parse_buckets("256:8192") == (256, 8192) == parse_buckets((256, 8192))
    for bad in ("256", "300:8192", "512:256", "a:b", (0, 8)):
        with pytest.raises(PackerError):
            parse_buckets(bad)


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


def test_each_bucket_is_a_build_that_stats_passes(bucketed):
    info = json.load(open(os.path.join(bucketed, "buckets.json")))
    assert [b["length"] for b in info["buckets"]] == [256, 512, 1024, 2048, 4096, 8192]
    for b in info["buckets"]:
        r = invoke("stats", os.path.join(bucketed, b["path"]), "--json")
        assert r.exit_code == 0, r.output
        m = json.load(open(os.path.join(bucketed, b["path"], "manifest.json")))
        assert m["seq_len"] == b["length"] and m["totals"]["padding"] == 0 and m["totals"]["rows"] == b["rows"]
        assert m["totals"]["pieces"] == m["totals"]["rows"]


def test_rerun_resume_and_overwrite(sample_build, bucketed, tmp_path):
    with pytest.raises(PackerError, match="not empty"):
        repack(sample_build, bucketed, buckets="256:8192", quiet=True)
    r = repack(sample_build, bucketed, buckets="256:8192", resume=True, quiet=True)
    assert r.units_run == 0
    out = str(tmp_path / "again")
    repack(sample_build, out, buckets="256:8192", workers=2, quiet=True)  # workers change no byte
    for name in ("len-00512/shards/000002.arrow", "len-08192/manifest.json", "buckets.json"):
        a, b = open(os.path.join(out, name), "rb").read(), open(os.path.join(bucketed, name), "rb").read()
        assert a == b or name == "buckets.json" and json.loads(a)["buckets"] == json.loads(b)["buckets"]
    os.remove(os.path.join(out, "buckets.json"))
    os.remove(os.path.join(out, "units", "000001.json"))
    r = repack(sample_build, out, buckets="256:8192", resume=True, quiet=True)
    assert r.units_run == 1
    with pytest.raises(PackerError, match="--seq-len"):
        repack(sample_build, out, buckets="256:8192", seq_len=512)


def test_cli_buckets(sample_build, tmp_path):
    r = invoke("repack", sample_build, str(tmp_path / "b"), "--buckets", "512:1024", "--summary-json", "-", "-q")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["ok"] and [b["length"] for b in s["buckets"]] == [512, 1024] and s["dropped"]["tail_under_min"]["tokens"] > 0
