"""One Storage interface, two stores: a local folder and an object-store prefix (fsspec's memory://
here; tests/io/test_object_storage.py runs a real S3 server). Every operation the rest of packer uses
behaves the same on both."""

from __future__ import annotations

import os
import uuid

import pytest

from packer import build
from packer import shards as S
from packer.errors import PackerError, ShardError
from packer.io import LocalStorage, ObjectStorage, storage_for
from tests._cli import cli, corpus, one_line  # noqa: F401 - corpus is a fixture
from tests.conftest import invoke as run_cli
from tests.inspect.test_stats import manifest, problems, save_manifest, shard_path


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    if request.param == "local":
        return storage_for(str(tmp_path / "root"))
    pytest.importorskip("fsspec")
    return storage_for(f"memory://packer-{uuid.uuid4().hex[:8]}/root")


def test_storage_for_decides_once_by_the_path():
    assert isinstance(storage_for("out/"), LocalStorage) and storage_for("out/").local
    s = storage_for("s3://bucket/out")
    assert isinstance(s, ObjectStorage) and not s.local
    assert s.path("shards/000001.arrow") == "s3://bucket/out/shards/000001.arrow"
    with pytest.raises(PackerError, match="not in the URI"):
        storage_for("s3://key:secret@bucket/out")


def test_put_read_list_delete_round_trip(store):
    assert store.list() == {} and store.tops() == []
    store.make_dirs(["shards", "units"])
    store.put("shards/a.arrow", b"abc")
    store.put_json("units/000000.json", {"k": 1})
    store.put("build.json", b"{}\n")
    assert store.read("shards/a.arrow") == b"abc"
    assert store.read("shards/a.arrow", size_hint=2) == b"abc"  # a stale size hint still reads it all
    assert store.read("units/000000.json") == b'{\n "k": 1\n}\n'
    assert store.list() == {"build.json": 3, "shards/a.arrow": 3, "units/000000.json": 12}
    assert store.tops() == ["build.json", "shards", "units"]
    assert store.size("shards/a.arrow") == 3 and store.size("shards/none") is None
    assert store.has_folder("units") and not store.has_folder("nothing")
    with pytest.raises(FileNotFoundError):
        store.read("missing.json")
    store.delete(["shards/a.arrow"])
    assert "shards/a.arrow" not in store.list()
    store.clear(["build.json", "units"], first="build.json")
    assert set(store.list()) == set()


def test_ranged_reads_and_streams(store):
    data = bytes(range(256)) * 40
    store.make_dirs([""])  # a local root is made by the build before it writes; a prefix needs nothing
    store.put("f.bin", data)
    f = store.ranged("f.bin")
    try:
        assert f.size == len(data)
        assert f.pread(10, 5) == data[5:15]
        assert f.pread(100, len(data) - 4) == data[-4:]
    finally:
        f.close()
    with store.stream("f.bin") as s:
        assert s.read() == data
    assert bytes(store.map("f.bin")) == data


def test_inside_refuses_names_that_leave_the_root(store):
    for ok in ("shards/000001.arrow", "a/b/c"):
        assert store.inside(ok)
    for bad in ("../x.arrow", "/etc/passwd", "shards/../../x", "", None, 7, "a\\..\\b"):
        assert not store.inside(bad), bad


def test_local_copy_of_a_local_file_is_the_file(tmp_path):
    s = storage_for(str(tmp_path))
    s.put("x.arrow", b"1234")
    with s.local_copy("x.arrow", 4, "", cache=None) as p:
        assert p == os.path.join(str(tmp_path), "x.arrow")


def test_a_local_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(PackerError, match="exists and is not a folder"):
        storage_for(str(tmp_path / "f")).tops()


# 4. Shard paths outside OUT are refused by every reader.
@pytest.mark.parametrize("bad", ["../x.arrow", "/etc/passwd", "shards/../../x.arrow"])
def test_shard_paths_outside_the_build_are_refused_everywhere(sample_build, copy_build, bad):
    from packer import PackedDataset

    out = copy_build(sample_build)
    open(os.path.join(os.path.dirname(out), "x.arrow"), "wb").write(open(shard_path(out), "rb").read())
    m = manifest(out)
    m["shards"][0]["path"] = bad
    save_manifest(out, m)
    with pytest.raises(ShardError, match="outside the build folder"):
        PackedDataset(out)
    res = run_cli("show", out, "0")
    assert res.exit_code == 1 and "outside the build folder" in res.stderr
    res = run_cli("stats", out)
    assert res.exit_code == 1 and any("outside the build folder" in ln for ln in problems(res))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["fifo", "dev/zero"])
def test_a_manifest_that_is_not_a_regular_file_is_one_line(sample_build, copy_build, kind):
    out = copy_build(sample_build)
    path = os.path.join(out, "manifest.json")
    os.unlink(path)
    os.mkfifo(path) if kind == "fifo" else os.symlink("/dev/zero", path)
    for cmd in (["stats", out], ["show", out, "0"]):
        r = cli(*cmd, timeout=60)
        assert r.returncode == 1
        one_line(r, "manifest.json")


# 10. --overwrite checks before it deletes; temp files of a killed top-level write are cleaned.
def test_overwrite_that_cannot_delete_deletes_nothing(tmp_path, corpus, monkeypatch):
    out = str(tmp_path / "out")
    build(corpus, out, seq_len=64, workers=1)
    before = sorted(os.listdir(out))
    shards = os.path.join(out, "shards")
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.fspath(p) == shards else real(p, mode, **kw))
    with pytest.raises(PackerError, match="nothing was deleted"):
        build(corpus, out, seq_len=64, workers=1, overwrite=True)
    assert sorted(os.listdir(out)) == before
    assert S.read_manifest(out)["seq_len"] == 64


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may delete anything")
def test_overwrite_of_a_read_only_build_is_one_line_and_keeps_it(tmp_path, corpus):
    out = str(tmp_path / "out")
    build(corpus, out, seq_len=64, workers=1)
    for d in (os.path.join(out, "shards"), out):
        os.chmod(d, 0o555)
    try:
        r = cli("build", corpus, out, "--seq-len", "64", "--workers", "1", "--overwrite")
        assert r.returncode == 2
        one_line(r, "cannot overwrite", "nothing was deleted")
        assert os.path.exists(os.path.join(out, "manifest.json"))
    finally:
        for d in (out, os.path.join(out, "shards")):
            os.chmod(d, 0o755)

