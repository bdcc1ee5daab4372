"""PackedDataset: rows, labels and positions against the shards; validation; processes."""

from __future__ import annotations

import json
import os
import pickle
import random

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

from packer import BuildConfig, PackedDataset, build, collate
from packer.errors import PackerError, ShardError

from tests.conftest import REPO

# --------------------------------------------------------------------------
# An independent reader (pyarrow only, as docs/format.md shows) and the
# definition of labels and positions, written the slow, obvious way.


def shard_rows(out: str):
    """(input_ids, doc_lens) of every row of a build, in manifest order."""
    m = json.load(open(os.path.join(out, "manifest.json")))
    for sh in m["shards"]:
        r = pa.ipc.open_file(pa.memory_map(os.path.join(out, sh["path"])))
        for b in range(r.num_record_batches):
            batch = r.get_batch(b)
            ids = batch.column("input_ids").values.to_numpy().reshape(-1, m["seq_len"])
            lens = batch.column("doc_lens").to_pylist()
            yield from zip(ids, lens)


def expected(ids: np.ndarray, lens: list[int]):
    L = len(ids)
    pos = np.empty(L, dtype=np.int64)
    lab = ids.astype(np.int64)
    s = 0
    for n in lens:
        pos[s:s + n] = np.arange(n)
        lab[s] = -100  # the first token of a piece is not predicted from what came before
        s += n
    pos[s:] = np.arange(L - s)  # the padding tail is a segment of its own
    lab[s:] = -100
    return pos, lab


@pytest.fixture(scope="module")
def ds(sample_build):
    return PackedDataset(sample_build)


def test_every_row_matches_its_shard(sample_build, ds):
    rows = list(shard_rows(sample_build))
    assert len(ds) == len(rows) == json.load(open(os.path.join(sample_build, "manifest.json")))["totals"]["rows"]
    multi = padded = 0
    for i, (ids, lens) in enumerate(rows):
        item = ds[i]
        pos, lab = expected(ids, lens)
        assert item["input_ids"].dtype == torch.int64 and item["input_ids"].shape == (ds.seq_len,)
        np.testing.assert_array_equal(item["input_ids"].numpy(), ids)
        np.testing.assert_array_equal(item["labels"].numpy(), lab)
        np.testing.assert_array_equal(item["position_ids"].numpy(), pos)
        assert item["doc_lens"].tolist() == lens
        multi += len(lens) > 1
        padded += sum(lens) < ds.seq_len
    assert multi > 100 and padded > 10  # the sample exercises boundaries and padding


def test_batched_rows_equal_single_rows(ds):
    idx = random.Random(0).sample(range(len(ds)), 300) + [0, len(ds) - 1, 5, 5]
    full = [i for i in range(2000) if ds[i]["doc_lens"].tolist() == [ds.seq_len]][:8]  # one piece fills the row
    assert len(full) == 8
    for chunk in (idx[:1], idx[:8], idx, full, full[:3] + idx[:2]):
        got = ds.__getitems__(chunk)
        assert len(got) == len(chunk)
        for i, row in zip(chunk, got):
            ref = ds[i]
            assert row.keys() == ref.keys()
            for k in ref:
                assert torch.equal(row[k], ref[k]), (i, k)


def test_no_label_crosses_a_document(ds):
    # Under the HF shift, slot t predicts labels[t + 1]: that target must be in t's piece.
    for i in range(0, len(ds), 7):
        item = ds[i]
        doc = np.repeat(np.arange(len(item["doc_lens"])), item["doc_lens"].numpy())
        lab = item["labels"].numpy()
        t = np.flatnonzero(lab[1:] != -100)
        assert np.all(t + 1 < len(doc)) and np.all(doc[t] == doc[t + 1])


def test_indexing(ds):
    assert torch.equal(ds[-1]["input_ids"], ds[len(ds) - 1]["input_ids"])
    assert torch.equal(ds[np.int64(3)]["labels"], ds[3]["labels"])
    assert torch.equal(ds[torch.tensor(3)]["labels"], ds[3]["labels"])
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(IndexError):
        ds.__getitems__([0, len(ds)])
    with pytest.raises(TypeError):
        ds["3"]


def test_rows_are_writable_copies(ds):
    a = ds[10]
    a["input_ids"].fill_(0)
    a["labels"].fill_(0)
    assert ds[10]["input_ids"].max() > 0 and ds[10]["labels"].max() > 0


def test_input_ids_int32_on_uint16_build_is_a_widening_copy(sample_build, ds):
    ds32 = PackedDataset(sample_build, input_ids_dtype=torch.int32)
    for i in (0, 17, len(ds) - 1):
        x = ds32[i]["input_ids"]
        assert x.dtype == torch.int32 and torch.equal(x.long(), ds[i]["input_ids"])
    b = collate(ds32.__getitems__([1, 2, 3]))
    assert b["input_ids"].dtype == torch.int32 and b["labels"].dtype == torch.int64


# --------------------------------------------------------------------------
# A uint32 build (vocab > 65536) through the real build path.


@pytest.fixture(scope="module")
def wide_build(tmp_path_factory):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    d = tmp_path_factory.mktemp("wide")
    vocab = {"[UNK]": 0, "</s>": 1} | {f"w{i}": i + 2 for i in range(70000)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.add_special_tokens(["</s>"])
    tok.save(str(d / "tokenizer.json"))
    rng = random.Random(1)
    texts = [" ".join(f"w{rng.randrange(70000)}" for _ in range(rng.randrange(1, 150))) for _ in range(300)]
    with open(d / "in.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    out = str(d / "out")
    build(BuildConfig.of(inputs=(str(d / "in.jsonl"),), out=out, seq_len=64, tokenizer=str(d / "tokenizer.json"), workers=1))
    return out


def test_uint32_build_int32_rows_are_views_of_a_private_map(wide_build):
    ds = PackedDataset(wide_build, input_ids_dtype=torch.int32)
    assert ds.dtype == "uint32"
    rows = list(shard_rows(wide_build))
    assert max(int(ids.max()) for ids, _ in rows) > 65536
    for i, (ids, lens) in enumerate(rows):
        item = ds[i]
        pos, lab = expected(ids, lens)
        np.testing.assert_array_equal(item["input_ids"].numpy(), ids.astype(np.int64))
        np.testing.assert_array_equal(item["labels"].numpy(), lab)
        np.testing.assert_array_equal(item["position_ids"].numpy(), pos)
    a, b = ds[3]["input_ids"], ds[3]["input_ids"]
    assert a.dtype == torch.int32 and a.data_ptr() == b.data_ptr()  # both view the same mapped bytes
    a[0] = -7  # copy-on-write: this process's page changes, the file does not
    assert PackedDataset(wide_build, verify=True)[3]["input_ids"][0] == int(rows[3][0][0])
    wide64 = PackedDataset(wide_build)
    assert wide64[3]["input_ids"].dtype == torch.int64  # the default widens (a copy)


# --------------------------------------------------------------------------
# Validation on open.


def _shard(out: str, k: int = 0) -> str:
    m = json.load(open(os.path.join(out, "manifest.json")))
    return os.path.join(out, m["shards"][k]["path"])


def _buffer_offset(path: str, column: str) -> int:
    """File offset of the first record batch's values buffer of ``column``."""
    src = pa.memory_map(path)
    base = src.read_buffer(1).address
    src.seek(0)
    values = pa.ipc.open_file(src).get_batch(0).column(column).values
    return values.buffers()[1].address - base


def _patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _first_row(out: str, k: int) -> int:
    m = json.load(open(os.path.join(out, "manifest.json")))
    return sum(s["rows"] for s in m["shards"][:k])


def test_missing_shard(sample_build, copy_build):
    """Refused at first use of the shard (opening touches no shard), and by verify=True on open."""
    out = copy_build(sample_build)
    os.unlink(_shard(out, 2))
    ds = PackedDataset(out)
    assert ds[0]["input_ids"].max() > 0  # the other shards read
    with pytest.raises(ShardError, match=r"000002\.arrow: shard is missing"):
        ds[_first_row(out, 2)]
    with pytest.raises(ShardError, match=r"000002\.arrow: shard is missing"):
        PackedDataset(out, verify=True)


def test_truncated_shard(sample_build, copy_build):
    out = copy_build(sample_build)
    p = _shard(out, 1)
    size = os.path.getsize(p)
    os.truncate(p, size - 100)
    msg = rf"000001\.arrow: shard is truncated \({size - 100} bytes, manifest says {size}\)"
    with pytest.raises(ShardError, match=msg):
        PackedDataset(out).__getitems__([0, _first_row(out, 1)])
    with pytest.raises(ShardError, match=msg):
        PackedDataset(out, verify=True)


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir])
def test_a_fifo_for_a_shard_is_refused_not_waited_on(sample_build, copy_build, make):
    """(or a folder)"""
    out = copy_build(sample_build)
    p = _shard(out, 0)
    os.unlink(p)
    make(p)
    with pytest.raises(ShardError, match=r"000000\.arrow: not a regular file"):
        PackedDataset(out)[0]


def _without_layout(out: str) -> str:
    """index.arrow rewritten as packer wrote it before the row layout (the columns of index version 1 only)."""
    from packer import shards as S
    from packer.io import storage_for

    data = open(os.path.join(out, "manifest.json"), "rb").read()
    storage_for(out).put(S.INDEX, S.index.index_bytes(S.read_manifest(out), data))
    assert S.open_index(storage_for(out)).layouts is None
    return out


@pytest.mark.parametrize("layout", [True, False])
def test_damaged_bytes_anywhere_give_a_shard_error_or_nothing(sample_build, copy_build, layout):
    """Damage in metadata, footer or data: a ShardError naming the shard, or rows read
    with no error (damage to padding or token bytes); never another exception.
    verify=True refuses every one. Read by the row layout, the header and batch headers are
    not read (rows are the undamaged ones), the footer is (any damage to it is refused)."""
    out = copy_build(sample_build)
    if not layout:
        _without_layout(out)
    p = _shard(out)
    size = os.path.getsize(p)
    body = _buffer_offset(p, "input_ids")
    rng = random.Random(0)
    offsets = list(range(0, body, 24)) + [size - k for k in range(4, 64, 8)] + [rng.randrange(size) for _ in range(10)]
    original = open(p, "rb").read()
    n_rows = json.load(open(os.path.join(out, "manifest.json")))["shards"][0]["rows"]
    clean = PackedDataset(out).batch(range(n_rows))
    refused, footer = 0, {size - k for k in range(4, 64, 8)}
    for off in offsets:
        _patch(p, off, bytes(b ^ 0xA5 for b in original[off:off + 4]))
        try:
            ds = PackedDataset(out)
            for a in range(0, n_rows, 512):
                got = ds.batch(range(a, min(a + 512, n_rows)))
                if layout and off < body:  # header bytes: not read
                    assert torch.equal(got["labels"], clean["labels"][a:a + 512]), off
            assert off not in footer or not layout, off
        except ShardError as e:
            assert str(e).startswith(p + ":"), e
            refused += 1
        with pytest.raises(ShardError, match=r"000000\.arrow: (checksum mismatch|not a readable)"):
            PackedDataset(out, verify=True)
        _patch(p, off, original[off:off + 4])
    assert refused > (6 if layout else len(offsets) // 3)  # most metadata damage is caught without reading everything


def test_flipped_token_byte_is_caught_by_verify(sample_build, copy_build):
    out = copy_build(sample_build)
    p = _shard(out)
    off = _buffer_offset(p, "input_ids") + 2 * 100
    with open(p, "rb") as f:
        f.seek(off)
        old = f.read(2)
    _patch(p, off, bytes([old[0] ^ 1, old[1]]))  # still a valid id: only the checksum can tell
    ds = PackedDataset(out)  # cheap checks pass: same size, same structure
    assert ds[0]["input_ids"][100] != int.from_bytes(old, "little")
    with pytest.raises(ShardError, match=r"000000\.arrow: checksum mismatch"):
        PackedDataset(out, verify=True)


def _flip_mid_tokens(out: str, k: int) -> None:
    """Flip one bit in the middle of shard ``k``'s first record batch's token data (the id stays valid)."""
    p = _shard(out, k)
    rows = pa.ipc.open_file(pa.memory_map(p)).get_batch(0).num_rows
    off = _buffer_offset(p, "input_ids") + 2 * (rows * 256 // 2)
    with open(p, "rb") as f:
        f.seek(off)
        old = f.read(1)
    _patch(p, off, bytes([old[0] ^ 1]))


def _read_after_its_hash(ds, row: int, conn=None):
    ds[row]  # the shard's first read in this process: read, its hash queued
    ds.wait_for_checks()
    try:
        ds[row]
    except ShardError as e:
        if conn is None:
            raise
        conn.send(str(e))
    else:
        if conn is not None:
            conn.send(None)


def test_a_flipped_token_byte_is_caught_in_the_background_by_default(sample_build, copy_build):
    """Issue 53.4: a default PackedDataset hashes each shard it reads in a thread, and the read after that
    hash refuses a shard whose bytes differ, naming it; in a forked process too (its own thread); ``verify=False``
    reads it without complaint; the clean shards read on."""
    import multiprocessing as mp

    out = copy_build(sample_build)
    _flip_mid_tokens(out, 1)
    row = _first_row(out, 1)
    ds = PackedDataset(out)
    with pytest.raises(ShardError, match=r"000001\.arrow: checksum mismatch"):
        _read_after_its_hash(ds, row)
    with pytest.raises(ShardError, match=r"000001\.arrow: checksum mismatch"):
        ds.batch([0, row + 1])
    assert len(ds.batch([0, 1])["input_ids"]) == 2  # shard 0 is clean
    ctx = mp.get_context("fork")
    a, b = ctx.Pipe()
    child = ctx.Process(target=_read_after_its_hash, args=(PackedDataset(out), row, b))
    child.start()
    assert "000001.arrow: checksum mismatch" in a.recv()
    child.join()
    quiet = PackedDataset(out, verify=False)
    _read_after_its_hash(quiet, row)
    assert quiet.batch([row, row + 1])["input_ids"].shape[0] == 2
    with pytest.raises(PackerError, match="verify must be True, False or 'background'"):
        PackedDataset(out, verify="yes")


def test_a_clean_build_reads_on_after_its_background_hashes(sample_build):
    ds = PackedDataset(sample_build)
    first = [ds[i]["input_ids"] for i in range(len(ds))]
    ds.wait_for_checks()
    assert not ds._hash.failed
    assert all(torch.equal(ds[i]["input_ids"], first[i]) for i in range(len(ds)))


def test_out_of_vocab_token_is_refused_on_read(sample_build, copy_build):
    out = copy_build(sample_build)
    p = _shard(out)
    _patch(p, _buffer_offset(p, "input_ids") + 2 * 5, (60000).to_bytes(2, "little"))
    # The read's own check, alone: the background hash would also name this shard, first where it finishes
    # before the second read (seen at load 18), with its own message.
    ds = PackedDataset(out, verify=False)
    with pytest.raises(ShardError, match=r"000000\.arrow: row 0 holds token id 60000 >= vocab_size 257"):
        ds[0]
    with pytest.raises(ShardError, match=r"000000\.arrow: row 0"):
        ds.__getitems__([4000, 0])
    assert ds[1]["input_ids"].max() < 257  # other rows still read


def test_corrupt_piece_index_is_refused(sample_build, copy_build):
    out = copy_build(sample_build)
    p = _shard(out, 3)
    _patch(p, _buffer_offset(p, "doc_lens"), (5000).to_bytes(4, "little"))
    with pytest.raises(ShardError, match=r"000003\.arrow: checksum mismatch"):
        PackedDataset(out, verify=True)
    m = json.load(open(os.path.join(out, "manifest.json")))
    ds = PackedDataset(out)  # without verify, a shard's index is checked when first mapped
    first = sum(s["rows"] for s in m["shards"][:3])
    assert ds[0]["doc_lens"].sum() <= 256  # other shards still read
    with pytest.raises(ShardError, match=r"000003\.arrow: a doc_lens entry is outside 1\.\.256: shard is corrupt"):
        ds[first]


def test_unknown_format_version(sample_build, copy_build):
    out = copy_build(sample_build)
    mp = os.path.join(out, "manifest.json")
    m = json.load(open(mp))
    m["format_version"] = 99
    json.dump(m, open(mp, "w"))
    with pytest.raises(ShardError, match="format version 99 is not supported"):
        PackedDataset(out)


def test_not_a_build(tmp_path):
    with pytest.raises(PackerError, match="not a packer build"):
        PackedDataset(str(tmp_path))


def test_builds_that_disagree_are_refused(sample_build, copy_build, wide_build):
    with pytest.raises(PackerError, match=r"seq_len 64 differs from 256"):
        PackedDataset([sample_build, wide_build])
    out = copy_build(sample_build)
    mp = os.path.join(out, "manifest.json")
    m = json.load(open(mp))
    m["tokenizer"]["fingerprint"] = "0" * 64
    json.dump(m, open(mp, "w"))
    with pytest.raises(PackerError, match=r"tokenizer fingerprint '0000.*' differs"):
        PackedDataset([sample_build, out])
    with pytest.raises(PackerError, match="named twice"):
        PackedDataset([sample_build, sample_build])


def test_several_builds_concatenate(sample_build, copy_build, ds):
    out = copy_build(sample_build)
    both = PackedDataset([sample_build, out])
    n = len(ds)
    assert len(both) == 2 * n and both.build_rows == (n, n)
    for i in (0, 123, n - 1):
        assert torch.equal(both[n + i]["input_ids"], ds[i]["input_ids"])
        assert torch.equal(both[n + i]["labels"], ds[i]["labels"])


# --------------------------------------------------------------------------
# Processes: pickling, fork, spawn.


def test_pickle_carries_no_mapped_data(ds):
    ds[0], ds[len(ds) - 1]  # map some shards in this process
    blob = pickle.dumps(ds)
    assert len(blob) < 50_000  # paths and sizes, not megabytes of rows
    again = pickle.loads(blob)
    for i in (0, 999, len(ds) - 1):
        assert torch.equal(again[i]["input_ids"], ds[i]["input_ids"])


def _batches(loader):
    keys = ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens")
    return [tuple(b[k].clone() for k in keys) + (b["max_seqlen"],) for b in loader]


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_workers_give_the_same_batches(ds, ctx):
    ds[5]  # mapped in the parent before the workers fork
    idx = list(range(0, len(ds), 97))[:96]
    ref = _batches(DataLoader(ds, batch_size=8, sampler=idx, collate_fn=collate))
    workers = 2 if ctx == "fork" else 1
    got = _batches(DataLoader(ds, batch_size=8, sampler=idx, collate_fn=collate, num_workers=workers,
                              multiprocessing_context=ctx, pin_memory=False))
    assert len(got) == len(ref) == 12
    for a, b in zip(ref, got):
        for x, y in zip(a[:-1], b[:-1]):
            assert torch.equal(x, y)
        assert a[-1] == b[-1]


# --------------------------------------------------------------------------
# The code in docs/dataset.md that says it runs.

DOCS = os.path.join(REPO, "docs", "dataset.md")


def _doc_blocks() -> list[str]:
    import re

    with open(DOCS) as f:
        return re.findall(r"<!-- tested -->\n```python\n(.*?)```", f.read(), re.S)


@pytest.mark.parametrize("k", [0, 1])
def test_docs_snippets(sample_build, k):
    blocks = _doc_blocks()
    assert len(blocks) == 2
    code = blocks[k].replace('"out/"', repr(sample_build))
    if "transformers" in code:
        pytest.importorskip("transformers")
    scope: dict = {}
    exec(compile(code, f"{DOCS} (tested block {k})", "exec"), scope)
    if k == 0:
        assert scope["state"]["position"] == 3 * 8  # stopped after 3 batches of epoch 1


# --------------------------------------------------------------------------
# Opening at scale (issue 31.1): the index, checks at first use, bounded maps.


def _indexed(out: str) -> str:
    from packer import shards as S
    from packer.io import storage_for

    S.write_manifest(storage_for(out), S.read_manifest(out))
    return out


def test_opening_an_indexed_build_touches_no_shard(sample_build, copy_build, ds, tmp_path):
    out = _indexed(copy_build(sample_build))
    os.rename(os.path.join(out, "shards"), str(tmp_path / "away"))
    opened = PackedDataset(out)  # manifest.json and index.arrow only
    assert opened._shards.indexes[0].from_index and len(opened) == len(ds) and opened.num_shards == 5
    with pytest.raises(ShardError, match=r"000000\.arrow: shard is missing"):
        opened[0]
    os.rename(str(tmp_path / "away"), os.path.join(out, "shards"))
    for i in random.Random(2).sample(range(len(ds)), 50) + [0, len(ds) - 1]:
        for k, v in ds[i].items():
            assert torch.equal(opened[i][k], v), (i, k)
    assert PackedDataset(out, verify=True)._shards.indexes[0].from_index


def test_maps_per_process_are_bounded(ds, sample_build):
    small = PackedDataset(sample_build, max_open_shards=2)
    idx = list(range(0, len(ds), 37))
    for i in idx:
        assert torch.equal(small[i]["labels"], ds[i]["labels"])
        assert len(small._maps) <= 2
    b = small.__getitems__(idx[::-3])
    assert torch.equal(b[0]["input_ids"], ds[idx[::-3][0]]["input_ids"]) and len(small._maps) <= 2
    with pytest.raises(PackerError, match="max_open_shards"):
        PackedDataset(sample_build, max_open_shards=0)


def test_state_shipped_to_workers_does_not_grow_with_the_shard_count(sample_build, tmp_path):
    """A spawned worker receives the dataset pickled: with an index, paths of the index, not of shards;
    PackedSampler's state is per build; a sampler pickles its dataset and no order. bench/open_scale.py makes the builds (hard links, no tokenizing)."""
    from packer import PackedSampler
    from tests.conftest import load_script

    make = load_script("bench/open_scale.py").make_build
    sizes = {}
    for n in (3, 400):
        d = PackedDataset(make(sample_build, str(tmp_path / f"n{n}"), n, shard=0))
        d[len(d) - 1]
        s = PackedSampler(d, seed=1)
        fresh = len(pickle.dumps(s))  # (iterated, it holds the epoch's order: a row count, not a shard count)
        next(iter(s))
        sizes[n] = (len(pickle.dumps(d)), len(pickle.dumps(s.state_dict())), fresh)
        assert d.num_shards == n and len(d) == n * json.load(open(os.path.join(sample_build, "manifest.json")))["shards"][0]["rows"]
    (d3, st3, s3), (d400, st400, s400) = sizes[3], sizes[400]
    assert abs(d400 - d3) < 64 and abs(st400 - st3) < 8 and abs(s400 - s3) < 64, sizes  # digits of counts, no more
    again = pickle.loads(pickle.dumps(d))
    assert again._shards.indexes[0].from_index and torch.equal(again[123]["input_ids"], d[123]["input_ids"])


def test_a_chat_build_refuses_a_shard_without_its_loss_mask(sample_build, copy_build):
    """The manifest says chat (columns: loss_mask), the shard lacks the column (checksum still right):
    training on every token would follow, so the shard is refused, at first use and under verify."""
    out = copy_build(sample_build)
    mp = os.path.join(out, "manifest.json")
    m = json.load(open(mp))
    m["columns"] = ["loss_mask"]
    json.dump(m, open(mp, "w"))
    for index in (False, True):
        if index:
            _indexed(out)
        with pytest.raises(ShardError, match=r"000000\.arrow: no loss_mask column, but the manifest says this is a chat build"):
            PackedDataset(out, verify=True)
        with pytest.raises(ShardError, match=r"000000\.arrow: no loss_mask column"):
            PackedDataset(out)[0]


@pytest.mark.parametrize("layout", [True, False])
@pytest.mark.parametrize("where", ["magic", "schema message", "a column renamed"])
def test_a_shard_whose_magic_or_schema_is_destroyed_is_refused_at_first_use(sample_build, copy_build, layout, where):
    """The file's start (ARROW1 magic, the stream's schema message: what packer stats, show and hf_dataset
    parse) is checked on a shard's first use, by the row layout too, which reads rows by offsets and
    the footer only (issue 41.9: 0a283c5 read such a shard without a word)."""
    out = copy_build(sample_build)
    if not layout:
        _without_layout(out)
    p = _shard(out, 1)
    head = open(p, "rb").read(4096)
    if where == "magic":
        _patch(p, 0, b"\0" * 6)
    elif where == "schema message":
        _patch(p, 16, b"\xee" * 200)
    else:  # a schema that parses, without a required column (the footer's copy keeps it)
        _patch(p, head.index(b"doc_lens"), b"doc_lenz")
    ds = PackedDataset(out)
    assert ds[0]["input_ids"].max() > 0  # shard 0 reads
    with pytest.raises(ShardError, match=r"000001\.arrow: (not an Arrow IPC file|not a readable Arrow file|schema does not match)"):
        ds[_first_row(out, 1)]
