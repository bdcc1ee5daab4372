"""The object-store requests of PackedDataset on an s3:// build (issue 31.5), counted at the server:
moto's S3 in this process behind bench/store_requests.py's counting layer. Open asks for the manifest
and its index only, whatever the number of shards (no listing); a shard is checked when first used,
so a missing or cut shard is one ShardError naming it then (or on open with verify=True)."""

from __future__ import annotations

import pytest

from packer.errors import ShardError

from tests._services import s3_client, s3_environment, upload_tree
from tests.conftest import load_script, write_jsonl


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'packer[storage-test]')")
    pytest.importorskip("boto3")
    srv = load_script("bench/store_requests.py").Server()
    try:
        with s3_environment(srv.endpoint):
            yield srv
    finally:
        srv.srv.shutdown()


@pytest.fixture(scope="module")
def local_build(tmp_path_factory) -> str:
    from packer import BuildConfig, build

    tmp = tmp_path_factory.mktemp("reqs")
    texts = [f"document {i} " + "word " * (10 + i % 30) for i in range(300)]
    out = str(tmp / "out")
    build(BuildConfig.of(inputs=(write_jsonl(tmp / "c.jsonl", texts),), out=out, seq_len=64, workers=1, unit_bytes=4096))
    return out


def _upload(local_build, bucket: str) -> str:
    s3_client().create_bucket(Bucket=bucket)
    upload_tree(local_build, bucket, "out")
    return f"s3://{bucket}/out"


def _requests(server, do) -> list[tuple[str, str]]:
    start = len(server.log)
    do()
    return server.log[start:]


def test_open_asks_for_the_manifest_and_index_only_and_lists_nothing(server, local_build, tmp_path):
    from packer import PackedDataset

    uri = _upload(local_build, "opened")
    got = {}
    made = _requests(server, lambda: got.setdefault("ds", PackedDataset(uri, cache_dir=tmp_path / "c")))
    ds = got["ds"]
    assert ds.num_shards >= 5
    assert {path for _, path in made} == {"/opened/out/manifest.json", "/opened/out/index.arrow"}
    assert {op for op, _ in made} <= {"HeadObject", "GetObject"} and len(made) <= 5  # (manifest.json: HEAD + GET, no HEAD for its size)
    row = ds._shards.entry(3).rel
    first = int(ds.shard_starts[3])
    used = _requests(server, lambda: ds[first])  # a first use: that shard alone is fetched
    assert {path for _, path in used} == {f"/opened/out/{row}"} and "GetObject" in {op for op, _ in used}


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_cut_shard_is_one_shard_error_naming_it_at_first_use(server, local_build, tmp_path, damage):
    from packer import PackedDataset

    bucket = f"damaged-{damage}"
    uri = _upload(local_build, bucket)
    key = "out/shards/000002.arrow"
    if damage == "missing":
        s3_client().delete_object(Bucket=bucket, Key=key)
    else:
        body = s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
        s3_client().put_object(Bucket=bucket, Key=key, Body=body[: len(body) // 2])
    ds = PackedDataset(uri, cache_dir=tmp_path / "c")  # opens: the shard is not asked for yet
    assert ds[0]["input_ids"].shape == (64,)  # the shards before it read
    with pytest.raises(ShardError) as e:
        ds[int(ds.shard_starts[2])]
    msg = str(e.value)
    assert msg.startswith(f"s3://{bucket}/{key}: shard is {damage}") and "\n" not in msg
    with pytest.raises(ShardError, match=f"000002.arrow: shard is {damage}"):
        PackedDataset(uri, cache_dir=tmp_path / "v", verify=True)  # verify=True still checks every shard on open
