"""The packing half of a unit (packer/pipeline/packed.py): documents in, one shard's bytes out, holding
every document whole (in pieces that tile it) whichever chunks they came in."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from packer.pipeline import pack_shard


@pytest.mark.parametrize("mode", ["bfd", "concat"])
def test_a_shard_holds_every_document_and_does_not_depend_on_the_chunks(mode):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, 200)
    tokens = rng.integers(0, 50000, int(lengths.sum())).astype(np.uint16)
    whole = pack_shard([tokens], [lengths], 128, mode, 65535, "uint16")
    cut = int(lengths[:77].sum())
    parts = pack_shard([tokens[:cut], tokens[cut:]], [lengths[:77], lengths[77:]], 128, mode, 65535, "uint16")
    assert bytes(whole.data) == bytes(parts.data)
    rec = whole.record(3, "shards/000003.arrow")
    assert rec["documents"] == 200 and rec["tokens"] == int(lengths.sum()) and rec["bytes"] == len(whole.data)
    t = pa.ipc.open_file(pa.py_buffer(whole.data)).read_all()
    ids = t.column("input_ids").combine_chunks().flatten().to_numpy().reshape(-1, 128)
    got = {}
    for r, (ls, ds, os_) in enumerate(zip(*(t.column(c).to_pylist() for c in ("doc_lens", "doc_index", "doc_offset")))):
        slot = 0
        for n, d, o in zip(ls, ds, os_):
            got.setdefault(d, []).append((o, ids[r, slot:slot + n]))
            slot += n
        assert (ids[r, slot:] == 65535).all()
    starts = np.cumsum(lengths) - lengths
    for d in range(200):
        joined = np.concatenate([a for _, a in sorted(got[d], key=lambda p: p[0])])
        assert np.array_equal(joined, tokens[starts[d]:starts[d] + lengths[d]])


def test_a_chat_shard_moves_each_mask_value_with_its_token():
    lengths = np.array([5, 3, 7])
    tokens = np.arange(15, dtype=np.uint16)
    mask = (tokens % 3 == 0).astype(np.uint8)
    s = pack_shard([tokens], [lengths], 8, "bfd", 99, "uint16", [mask])
    t = pa.ipc.open_file(pa.py_buffer(s.data)).read_all()
    ids = t.column("input_ids").combine_chunks().flatten().to_numpy()
    m = t.column("loss_mask").combine_chunks().flatten().to_numpy()
    assert (m[ids == 99] == 0).all() and (m[ids != 99] == (ids[ids != 99] % 3 == 0)).all()
    assert s.trained == int(mask.sum())


@pytest.mark.parametrize("seed", range(3))
def test_documents_in_scattered_runs_give_the_bytes_of_documents_back_to_back(seed):
    from packer.pipeline import Scattered

    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 700, 150)
    tokens = rng.integers(0, 60000, int(lengths.sum())).astype(np.uint16)
    cuts = np.unique(rng.integers(1, len(tokens), 400))  # runs that split documents anywhere
    bounds = np.concatenate([[0], cuts, [len(tokens)]])
    flat = [np.zeros(5, np.uint16), np.zeros(len(tokens) + 7, np.uint16)]  # two arrays, the runs placed apart
    flat[1][7:] = tokens
    runs = Scattered(flat, np.ones(len(bounds) - 1, np.int64), bounds[:-1] + 7, np.diff(bounds))
    for mode in ("bfd", "concat"):
        want = pack_shard([tokens], [lengths], 256, mode, 65535, "uint16")
        got = pack_shard(runs, [lengths], 256, mode, 65535, "uint16")
        assert bytes(got.data) == bytes(want.data)
