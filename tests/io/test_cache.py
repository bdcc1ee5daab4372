"""packer/io/cache.py: the local cache of a remote build's shards: verified as they arrive, published
whole, bounded, shared by processes. PackedDataset on an S3-compatible server (the fixtures of
tests/io/test_object_storage.py), and the ShardCache alone over a local store."""

from __future__ import annotations

import json
import os

import pytest

from packer.errors import PackerError, ShardError

from tests._services import make_bucket, objects, s3_client, upload_tree
from tests.io.test_object_storage import S_KEY, local_build, s3  # noqa: F401 - fixtures


# PackedDataset over a build on S3.


@pytest.fixture(scope="module")
def s3_build(s3, local_build) -> str:
    make_bucket("built")
    upload_tree(local_build, "built", "out")
    return "s3://built/out"


def _shard_sizes(local_build) -> list[int]:
    return [sh["bytes"] for sh in json.load(open(os.path.join(local_build, "manifest.json")))["shards"]]


def _cache_files(folder) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".arrow")}


def test_dataset_on_s3_reads_the_local_rows_through_the_cache(s3_build, local_build, tmp_path):
    torch = pytest.importorskip("torch")
    from packer import PackedDataset

    ref = PackedDataset(local_build)
    cache = tmp_path / "cache"
    ds = PackedDataset(s3_build, cache_dir=cache)
    assert len(ds) == len(ref) and not cache.exists()  # nothing fetched on open
    row = ds[0]
    want = ref[0]
    for k in want:
        assert torch.equal(row[k], want[k])
    m = json.load(open(os.path.join(local_build, "manifest.json")))
    assert set(_cache_files(cache)) == {m["shards"][0][S_KEY] + ".arrow"}  # only the shard used
    for i in range(0, len(ds), 7):
        assert torch.equal(ds[i]["input_ids"], ref[i]["input_ids"]) and torch.equal(ds[i]["labels"], ref[i]["labels"])
    b, rb = ds.batch(list(range(len(ds)))), ref.batch(list(range(len(ref))))
    assert all(torch.equal(b[k], rb[k]) for k in ("input_ids", "labels", "position_ids", "cu_seqlens"))


def test_dataset_cache_stays_within_its_bound(s3_build, local_build, tmp_path):
    torch = pytest.importorskip("torch")
    from packer import PackedDataset

    sizes = _shard_sizes(local_build)
    bound = int(2.5 * max(sizes))
    assert bound < sum(sizes)
    cache = tmp_path / "cache"
    ref = PackedDataset(local_build)
    ds = PackedDataset(s3_build, cache_dir=cache, cache_max_bytes=bound)
    for i in list(range(len(ds))) + list(range(len(ds) - 1, -1, -5)):
        assert torch.equal(ds[i]["input_ids"], ref[i]["input_ids"])
        assert sum(_cache_files(cache).values()) <= bound
    with pytest.raises(PackerError, match="smaller than shard"):
        PackedDataset(s3_build, cache_dir=tmp_path / "tiny", cache_max_bytes=min(sizes) - 1)[0]


def test_dataset_refuses_a_corrupt_remote_shard_and_caches_nothing_of_it(s3, local_build, tmp_path):
    pytest.importorskip("torch")
    from packer import PackedDataset

    make_bucket("corrupt")
    upload_tree(local_build, "corrupt", "out")
    c = s3_client()
    body = bytearray(c.get_object(Bucket="corrupt", Key="out/shards/000000.arrow")["Body"].read())
    body[len(body) // 2] ^= 0x01  # one flipped bit, same size
    c.put_object(Bucket="corrupt", Key="out/shards/000000.arrow", Body=bytes(body))
    cache = tmp_path / "cache"
    ds = PackedDataset("s3://corrupt/out", cache_dir=cache)
    with pytest.raises(ShardError, match="000000.arrow: checksum mismatch"):
        ds[0]
    assert os.listdir(cache) == [".lock"]  # no shard, no temp file
    c.delete_object(Bucket="corrupt", Key="out/shards/000001.arrow")
    ds = PackedDataset("s3://corrupt/out", cache_dir=cache)  # open lists nothing: the shard is checked at first use
    with pytest.raises(ShardError, match="000001.arrow: shard is missing"):
        ds[int(ds.shard_starts[1])]


def test_dataset_uses_the_cache_without_downloading_again(s3, local_build, tmp_path):
    torch = pytest.importorskip("torch")
    from packer import PackedDataset

    make_bucket("cached")
    upload_tree(local_build, "cached", "out")
    cache = tmp_path / "cache"
    ref = PackedDataset(local_build)
    PackedDataset("s3://cached/out", cache_dir=cache, verify=True)  # fetches and checks every shard
    c = s3_client()
    for key in [k for k in objects("cached", "out") if k.startswith("shards/")]:
        body = bytearray(c.get_object(Bucket="cached", Key="out/" + key)["Body"].read())
        body[-100] ^= 0xFF
        c.put_object(Bucket="cached", Key="out/" + key, Body=bytes(body))  # the store now holds damaged shards
    ds = PackedDataset("s3://cached/out", cache_dir=cache)
    for i in range(len(ds)):
        assert torch.equal(ds[i]["input_ids"], ref[i]["input_ids"])  # served from the verified cache


def test_dataloader_workers_share_one_bounded_cache(s3_build, local_build, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from packer import PackedDataset, collate

    bound = int(2.5 * max(_shard_sizes(local_build)))
    ref = PackedDataset(local_build)
    ds = PackedDataset(s3_build, cache_dir=tmp_path / "cache", cache_max_bytes=bound)
    seen = []
    for batch in DataLoader(ds, batch_size=16, num_workers=2, collate_fn=collate):
        seen.append(batch["input_ids"])
    got = torch.cat(seen)
    assert torch.equal(got, ref.batch(list(range(len(ref))))["input_ids"])
    assert sum(_cache_files(tmp_path / "cache").values()) <= bound




# The ShardCache alone, over a local store standing in for the remote one.


def _store_of(tmp_path, shards: dict[str, bytes]):
    from packer.io import storage_for

    root = tmp_path / "store"
    root.mkdir()
    for name, data in shards.items():
        (root / name).write_bytes(data)
    return storage_for(str(root))


def _xxh(data: bytes) -> str:
    import xxhash

    return xxhash.xxh3_128(data).hexdigest()


def test_a_shard_is_published_under_its_checksum_and_served_again_without_the_store(tmp_path):
    from packer.io.cache import ShardCache

    data = os.urandom(5000)
    store = _store_of(tmp_path, {"a.arrow": data})
    cache = ShardCache(tmp_path / "cache")
    with cache.local(store, "a.arrow", len(data), _xxh(data)) as path:
        assert path == cache.path_for(_xxh(data)) and open(path, "rb").read() == data
    os.unlink(tmp_path / "store" / "a.arrow")  # the store has it no more: the cached copy is used
    with cache.local(store, "a.arrow", len(data), _xxh(data)) as path:
        assert open(path, "rb").read() == data
    assert sorted(os.listdir(tmp_path / "cache")) == [".lock", _xxh(data) + ".arrow"]


@pytest.mark.parametrize("damage", ["flipped bit", "cut", "longer"])
def test_a_shard_that_is_not_what_the_manifest_says_is_refused_and_nothing_is_kept(tmp_path, damage):
    from packer.io.cache import ShardCache

    data = os.urandom(4096)
    stored = {"flipped bit": data[:100] + bytes([data[100] ^ 1]) + data[101:], "cut": data[:-1],
              "longer": data + b"x"}[damage]
    store = _store_of(tmp_path, {"a.arrow": stored})
    word = {"flipped bit": "checksum mismatch", "cut": "truncated", "longer": "longer than the manifest says"}[damage]
    with pytest.raises(ShardError, match=word):
        with ShardCache(tmp_path / "cache").local(store, "a.arrow", len(data), _xxh(data)):
            pass
    assert os.listdir(tmp_path / "cache") == [".lock"]  # no shard, no temp file


def test_the_least_recently_used_shards_make_room_within_the_bound(tmp_path):
    from packer.io.cache import ShardCache

    blobs = {f"{i}.arrow": os.urandom(1000) for i in range(4)}
    store = _store_of(tmp_path, blobs)
    cache = ShardCache(tmp_path / "cache", max_bytes=2500)
    for i, name in enumerate(["0.arrow", "1.arrow", "0.arrow", "2.arrow"]):
        with cache.local(store, name, 1000, _xxh(blobs[name])):
            pass
        os.utime(cache.path_for(_xxh(blobs[name])), (1000 + i, 1000 + i))  # use order, whatever the clock's grain
    kept = {n for n in os.listdir(tmp_path / "cache") if n.endswith(".arrow")}
    assert kept == {_xxh(blobs["0.arrow"]) + ".arrow", _xxh(blobs["2.arrow"]) + ".arrow"}  # 1 was used longest ago


def test_a_missing_checksum_a_bound_below_the_shard_and_a_missing_shard_are_refused(tmp_path):
    from packer.io.cache import ShardCache

    store = _store_of(tmp_path, {"a.arrow": b"x" * 100})
    with pytest.raises(ShardError, match="no checksum"):
        with ShardCache(tmp_path / "c1").local(store, "a.arrow", 100, ""):
            pass
    with pytest.raises(PackerError, match="smaller than shard"):
        with ShardCache(tmp_path / "c2", max_bytes=99).local(store, "a.arrow", 100, _xxh(b"x" * 100)):
            pass
    with pytest.raises(ShardError, match="shard is missing"):
        with ShardCache(tmp_path / "c3").local(store, "b.arrow", 100, _xxh(b"x" * 100)):
            pass
    with pytest.raises(PackerError, match="must be positive"):
        ShardCache(tmp_path / "c4", max_bytes=0)
