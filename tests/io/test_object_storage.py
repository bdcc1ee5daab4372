"""Inputs and builds on object storage, against a real S3-compatible server
(moto's server mode on 127.0.0.1, started for this module, stopped after).

What holds: a build reading s3:// inputs writes the shards a local build of
the same files writes; a build writing to s3:// holds, object for object,
the bytes of the local build folder; resume on the store runs exactly the
units whose record or whole shard is missing; nothing secret reaches a URI,
a manifest or a message. PackedDataset reading a build on the store through its
bounded, verified local cache: tests/io/test_cache.py."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from packer import BuildConfig, build
from packer.errors import PackerError

from tests._services import S3_ENV, folder_files, make_bucket, moto_s3, objects, s3_client, upload_tree
from tests.conftest import SAMPLE, write_jsonl

SETTINGS = dict(seq_len=256, unit_bytes=300_000)  # corpus.jsonl (2 MB) becomes 7 ranged slices


@pytest.fixture(scope="module")
def s3():
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'packer[storage-test]')")
    pytest.importorskip("boto3")
    with moto_s3() as env:
        yield env


@pytest.fixture
def bucket(s3) -> str:
    return make_bucket(f"b-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="module")
def corpus(s3) -> str:
    """sample_data uploaded once, as s3://corpus/sample/..."""
    make_bucket("corpus")
    upload_tree(SAMPLE, "corpus", "sample")
    return "s3://corpus/sample"


@pytest.fixture(scope="module")
def local_build(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("local") / "out")
    build(BuildConfig.of(inputs=(SAMPLE,), out=out, workers=1, **SETTINGS))
    return out


def _manifest_as_if(m: dict, old: str, new: str) -> dict:
    """``m`` with input paths under ``old`` renamed to ``new`` and the plan hash (over paths) dropped."""
    m = json.loads(json.dumps(m).replace(old, new))
    m["settings"].pop("input_plan")
    return m


def test_s3_inputs_give_the_shards_of_a_local_build(corpus, local_build, tmp_path):
    out = str(tmp_path / "out")
    r = build(BuildConfig.of(inputs=(corpus,), out=out, workers=2, **SETTINGS))
    got, want = folder_files(out), folder_files(local_build)
    shards = sorted(k for k in want if k.startswith("shards/"))
    assert len(shards) >= 10 and sorted(k for k in got if k.startswith("shards/")) == shards
    for k in shards:
        assert got[k] == want[k], k
    local_m = json.loads(want["manifest.json"])
    assert _manifest_as_if(r.manifest, corpus, "X") == _manifest_as_if(local_m, SAMPLE, "X")
    # The object store's files were read in ranged slices, each from its own start.
    jsonl = [s for sh in r.manifest["shards"] for s in sh["sources"] if s["path"] == corpus + "/corpus.jsonl"]
    assert len(jsonl) >= 5 and any(s["start"] > 0 for s in jsonl)


@pytest.mark.parametrize("workers", [1, 2])
def test_s3_out_holds_the_local_build_byte_for_byte(bucket, local_build, workers):
    out = f"s3://{bucket}/builds/a"
    build(BuildConfig.of(inputs=(SAMPLE,), out=out, workers=workers, **SETTINGS))
    got = objects(bucket, "builds/a")
    assert got == folder_files(local_build)  # build.json, units/, shards/, manifest.json: the same bytes
    assert not any(".tmp" in k for k in got)


def test_resume_on_s3_runs_exactly_the_unfinished_units(bucket, local_build):
    out = f"s3://{bucket}/out"
    cfg = BuildConfig.of(inputs=(SAMPLE,), out=out, workers=1, **SETTINGS)
    build(cfg)
    c = s3_client()
    # As a killed build leaves it: no manifest; unit 1 without its record, unit 3
    # without its shard, unit 5 with a cut shard (its record promises more bytes).
    c.delete_object(Bucket=bucket, Key="out/manifest.json")
    c.delete_object(Bucket=bucket, Key="out/units/000001.json")
    c.delete_object(Bucket=bucket, Key="out/shards/000003.arrow")
    body = c.get_object(Bucket=bucket, Key="out/shards/000005.arrow")["Body"].read()
    c.put_object(Bucket=bucket, Key="out/shards/000005.arrow", Body=body[: len(body) // 2])
    r = build(cfg.but(resume=True))
    assert (r.units_run, r.units_skipped) == (3, len(r.manifest["shards"]) - 3)
    assert objects(bucket, "out") == folder_files(local_build)
    again = build(cfg.but(resume=True))
    assert again.units_run == 0 and "build was already complete: nothing to do" in again.notes


def test_the_rules_of_an_output_folder_hold_on_s3(bucket):
    out = f"s3://{bucket}/out"
    cfg = BuildConfig.of(inputs=(SAMPLE,), out=out, workers=1, **SETTINGS)
    build(cfg)
    with pytest.raises(PackerError, match="is not empty: pass resume=True"):
        build(cfg)
    with pytest.raises(PackerError, match="seq_len was 256, now 128"):
        build(cfg.but(resume=True, seq_len=128))
    r = build(cfg.but(overwrite=True, seq_len=128))
    assert r.manifest["seq_len"] == 128 and json.loads(objects(bucket, "out")["build.json"])["settings"]["seq_len"] == 128
    s3_client().put_object(Bucket=bucket, Key="out/notes.txt", Body=b"mine")
    with pytest.raises(PackerError, match=r"refusing to overwrite .*notes\.txt"):
        build(cfg.but(overwrite=True))
    s3_client().put_object(Bucket=bucket, Key="file-out", Body=b"x")
    with pytest.raises(PackerError, match="exists and is not a folder"):
        build(cfg.but(out=f"s3://{bucket}/file-out"))


def test_missing_input_and_bad_names_are_one_line(bucket, tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(PackerError, match=rf"input not found: s3://{bucket}/nothing"):
        build(BuildConfig.of(inputs=(f"s3://{bucket}/nothing",), out=out))
    s3_client().put_object(Bucket=bucket, Key="doc.pdf", Body=b"x")
    with pytest.raises(PackerError, match="unknown input format"):
        build(BuildConfig.of(inputs=(f"s3://{bucket}/doc.pdf",), out=out))
    with pytest.raises(PackerError, match="globs are not expanded"):
        build(BuildConfig.of(inputs=(f"s3://{bucket}/*.jsonl",), out=out))
    with pytest.raises(PackerError, match=r"^cannot read s3://no-such-bucket-x/out/\.packer\.lock: .*bucket") as e:
        build(BuildConfig.of(inputs=(SAMPLE,), out="s3://no-such-bucket-x/out"))
    assert "\n" not in str(e.value)


def test_nothing_secret_in_uris_manifests_or_messages(bucket, corpus, tmp_path):
    secret = S3_ENV["AWS_SECRET_ACCESS_KEY"]
    key_id = S3_ENV["AWS_ACCESS_KEY_ID"]
    for uri in (f"s3://{key_id}:{secret}@{bucket}/x", f"s3://{bucket}/x?secret_key={secret}"):
        with pytest.raises(PackerError) as e:
            build(BuildConfig.of(inputs=(SAMPLE,), out=uri))
        msg = str(e.value)
        assert "through the environment" in msg and secret not in msg and key_id not in msg and "\n" not in msg
        with pytest.raises(PackerError) as e:
            build(BuildConfig.of(inputs=(uri,), out=str(tmp_path / "o")))
        assert secret not in str(e.value)
    out = f"s3://{bucket}/out"
    r = build(BuildConfig.of(inputs=(corpus,), out=out, workers=1, **SETTINGS))
    written = b"".join(objects(bucket, "out").values()) + "\n".join(r.notes).encode()
    assert secret.encode() not in written and key_id.encode() not in written


def test_a_bad_record_deep_in_a_remote_slice_is_named_by_line(bucket, tmp_path):
    texts = [f"document {i} " + "x" * 900 for i in range(600)]
    path = write_jsonl(tmp_path / "c.jsonl", texts)
    lines = open(path, "rb").read().splitlines(keepends=True)
    lines[451] = b'{"text": "unterminated\n'
    with open(path, "wb") as f:
        f.writelines(lines)
    s3_client().upload_file(path, bucket, "in/c.jsonl")
    local = build(BuildConfig.of(inputs=(path,), out=str(tmp_path / "l"), workers=1, seq_len=128, unit_bytes=100_000))
    remote = build(BuildConfig.of(inputs=(f"s3://{bucket}/in/c.jsonl",), out=str(tmp_path / "r"), workers=1, seq_len=128,
                               unit_bytes=100_000))
    assert local.manifest["totals"]["skipped_examples"] == {"malformed_json": [f"{path}:452"]}
    assert remote.manifest["totals"]["skipped_examples"] == {"malformed_json": [f"s3://{bucket}/in/c.jsonl:452"]}
    assert _manifest_as_if(remote.manifest, f"s3://{bucket}/in/c.jsonl", "X") == _manifest_as_if(local.manifest, path, "X")


def test_an_fsspec_scheme_reads_and_writes_like_a_local_folder(local_build, tmp_path):
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    names = ("corpus.jsonl", "corpus.parquet", "corpus.jsonl.zst")
    for n in names:
        with open(os.path.join(SAMPLE, n), "rb") as src, mem.open(f"/packer-test/{n}", "wb") as dst:
            dst.write(src.read())
    try:
        a = build(BuildConfig.of(inputs=tuple(os.path.join(SAMPLE, n) for n in sorted(names)), out=str(tmp_path / "a"),
                              workers=1, **SETTINGS))
        b = build(BuildConfig.of(inputs=("memory://packer-test",), out=str(tmp_path / "b"), workers=2, **SETTINGS))
    finally:
        mem.rm("/packer-test", recursive=True)
    assert [s[S_KEY] for s in a.manifest["shards"]] == [s[S_KEY] for s in b.manifest["shards"]]
    assert folder_files(str(tmp_path / "a"))["shards/000000.arrow"] == folder_files(str(tmp_path / "b"))["shards/000000.arrow"]
    # And as OUT: the local build's files, object for object.
    try:
        build(BuildConfig.of(inputs=(SAMPLE,), out="memory://packer-out/b", workers=1, **SETTINGS))
        got = {p[len("/packer-out/b/"):]: mem.cat_file(p) for p in mem.find("/packer-out/b")}
    finally:
        mem.rm("/packer-out", recursive=True)
    assert got == folder_files(local_build)


def test_a_file_uri_out_is_written_atomically_as_a_local_folder(local_build, tmp_path):
    out = tmp_path / "out"
    build(BuildConfig.of(inputs=(SAMPLE,), out=out.as_uri(), workers=1, **SETTINGS))
    assert folder_files(str(out)) == folder_files(local_build)


S_KEY = "xxh3_128"


# packer stats over a build on S3.


def test_stats_verifies_a_build_on_s3_as_it_does_the_local_one(bucket, local_build):
    """The same figures from s3:// as from the local folder, with every byte read;
    a flipped byte, a missing shard and a stray object are each reported."""
    from packer.inspect import stats as st

    upload_tree(local_build, bucket, "out")
    out = f"s3://{bucket}/out"
    local, remote = st.check(local_build), st.check(out)
    assert not local.problems and not remote.problems
    assert remote.bytes_read == local.bytes_read > 0
    want, got = st.figures(local), st.figures(remote)
    want.pop("build", None), got.pop("build", None)
    assert got == want
    assert st.figures(st.check(out, deep=False))["rows"] == want["rows"]

    m = json.load(open(os.path.join(local_build, "manifest.json")))
    first, second = m["shards"][0]["path"], m["shards"][1]["path"]
    data = bytearray(open(os.path.join(local_build, first), "rb").read())
    data[len(data) // 2] ^= 0x01
    c = s3_client()
    c.put_object(Bucket=bucket, Key=f"out/{first}", Body=bytes(data))
    c.delete_object(Bucket=bucket, Key=f"out/{second}")
    c.put_object(Bucket=bucket, Key="out/shards/stray.arrow", Body=b"x")
    kinds = {(p.path, p.kind) for p in st.check(out).problems}
    assert (first, "checksum") in kinds
    assert (second, "missing") in kinds
    assert ("shards/stray.arrow", "extra") in kinds


def test_stats_cli_takes_a_uri(bucket, local_build):
    from click.testing import CliRunner

    from packer.cli import main

    upload_tree(local_build, bucket, "out")
    r = CliRunner().invoke(main, ["stats", f"s3://{bucket}/out", "-q"])
    assert r.exit_code == 0, r.output
    assert "verified" in r.output and "OK" in r.output
    r = CliRunner().invoke(main, ["stats", f"s3://{bucket}/nothing-here", "-q"])
    assert r.exit_code != 0 and "not a packer build" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)  # one line, no traceback
