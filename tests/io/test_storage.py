"""One Storage interface, two stores: a local folder and an object-store prefix (fsspec's memory://
here; tests/io/test_object_storage.py runs a real S3 server). Every operation the rest of packer uses
behaves the same on both."""

from __future__ import annotations

import os
import uuid

import pytest

from packer.errors import PackerError
from packer.io import LocalStorage, ObjectStorage, storage_for


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
