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


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_tokens_copied_into_the_file_give_the_bytes_of_a_shard_array(dtype):
    """lay_out writes the tokens straight into the file's own buffers (issue 53.3): the same bytes and
    row layout as the shard-sized array it used to fill and lay out, across several record batches."""
    from packer import shards as S
    from packer.pack import pack
    from packer.pipeline import Scattered, lay_out
    from packer.pipeline.packed import gather

    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 40, 3000)
    tokens = rng.integers(0, 60000, int(lengths.sum())).astype(dtype)
    starts = np.cumsum(lengths) - lengths
    for mode in ("bfd", "concat"):
        layout = pack(lengths, 16, mode)
        assert layout.num_rows > 3 * 1024  # several record batches, the last one short
        out = gather([tokens], np.zeros(len(lengths), np.int64), starts, layout, 7, dtype)
        table = S.shard_table(out, 16, layout.row, layout.length, layout.doc, layout.offset, layout.num_rows)
        want = S.table_bytes(table)
        got = lay_out([tokens], np.zeros(len(lengths), np.int64), starts, lengths, layout, 7, dtype)
        assert bytes(got.data) == bytes(want)
        assert got.rows_at == S.layout.to_record(S.layout.shard_layout(want, layout.num_rows, 16, dtype, False))
        runs = Scattered([tokens], np.zeros(1, np.int64), np.zeros(1, np.int64), np.array([len(tokens)]))
        assert bytes(lay_out(runs, None, starts, lengths, layout, 7, dtype).data) == bytes(want)


def _mapped_rss(path: str) -> int:
    """Resident bytes of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, mine = 0, False
    for line in open("/proc/self/smaps"):
        if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:
            mine = line.rstrip().endswith(path)
        elif mine and line.startswith("Rss:"):
            total += int(line.split()[1]) << 10
    return total


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/smaps"), reason="reads /proc/self/smaps")
def test_a_big_mapped_chunk_is_let_go_as_it_is_copied(tmp_path, monkeypatch):
    """A chunk's ids mapped from its spill file, copied into the shard, leave (almost) nothing of the
    file resident in the assembler (issue 53.3): its output and one step of input, not both whole."""
    from packer.pipeline import packed, spill
    from packer.pipeline.plan import ChunkResult

    monkeypatch.setattr(packed, "RELEASE_BYTES", 1 << 20)
    monkeypatch.setattr(packed, "RELEASE_STEP", 1 << 20)
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 5000, 4000)
    tokens = rng.integers(0, 60000, int(lengths.sum())).astype(np.uint16)  # ~20 MB
    res = spill.put(ChunkResult(tokens, lengths, (), 0), str(tmp_path / "c"))
    mapped = spill.take(res).tokens
    shard = pack_shard([mapped], [lengths], 2048, "bfd", 65535, "uint16")
    assert _mapped_rss(res.tokens.path) <= 2 << 20, "the mapped chunk stayed resident"
    assert bytes(shard.data) == bytes(pack_shard([tokens], [lengths], 2048, "bfd", 65535, "uint16").data)
