"""index.arrow: the shard list beside the manifest, as columns (docs/format.md), and when readers trust it."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from packer import shards as S
from packer.errors import ShardError
from packer.io import storage_for


@pytest.fixture
def indexed(sample_build, copy_build):
    """A build with its index (builds write one; written again here, so this holds for any sample)."""
    out = copy_build(sample_build)
    store = storage_for(out)
    S.write_manifest(store, S.read_manifest(store))
    return out


def test_a_build_writes_its_index(sample_build):
    assert S.open_index(storage_for(sample_build)).from_index


def test_the_index_is_the_manifests_list_readable_by_pyarrow_alone(indexed):
    m = json.load(open(os.path.join(indexed, "manifest.json")))
    t = pa.ipc.open_file(pa.memory_map(os.path.join(indexed, "index.arrow"))).read_all()
    meta = t.schema.metadata
    assert meta[b"packer_index_version"] == b"1"
    assert int(meta[b"packer_manifest_bytes"]) == os.path.getsize(os.path.join(indexed, "manifest.json"))
    assert json.loads(meta[b"packer_manifest"]) == {k: v for k, v in m.items() if k != "shards"}
    assert t.column("path").to_pylist() == [e["path"] for e in m["shards"]]
    for k in ("unit", "rows", "bytes", "xxh3_128", "tokens", "pieces", "documents", "documents_split", "padding"):
        assert t.column(k).to_pylist() == [e[k] for e in m["shards"]], k
    starts = t.column("row_start").to_pylist()
    assert starts[0] == 0 and all(b - a == e["rows"] for a, b, e in zip(starts, starts[1:], m["shards"]))


def test_write_manifest_leaves_the_manifests_bytes_as_they_were(sample_build, indexed):
    """(and the index's: a build is byte-identical run to run)"""
    assert open(os.path.join(indexed, "index.arrow"), "rb").read() == open(os.path.join(sample_build, "index.arrow"), "rb").read()
    assert open(os.path.join(indexed, "manifest.json"), "rb").read() == open(os.path.join(sample_build, "manifest.json"), "rb").read()


def test_a_matching_index_is_used_and_an_older_build_reads_the_manifest(indexed, tmp_path):
    import shutil

    from packer import PackedDataset

    x = S.open_index(storage_for(indexed))
    assert x.from_index and x.source.endswith("index.arrow")
    older = str(tmp_path / "older")
    shutil.copytree(indexed, older)
    os.unlink(os.path.join(older, "index.arrow"))  # as a packer before the index wrote it
    old = S.open_index(storage_for(older))
    assert not old.from_index
    a, b = PackedDataset(indexed), PackedDataset(older)
    assert len(a) == len(b) and (a[len(a) - 1]["input_ids"] == b[len(b) - 1]["input_ids"]).all()
    assert x.n == old.n and x.total_rows == old.total_rows and x.head == old.head
    assert [x.path(k) for k in range(x.n)] == [old.path(k) for k in range(old.n)]
    assert (x.starts == old.starts).all() and (x.nbytes == old.nbytes).all()


@pytest.mark.parametrize("change", ["manifest edited", "index garbage", "index of another build", "index cut"])
def test_an_index_that_does_not_match_is_ignored(indexed, change, tmp_path):
    mp, ip = os.path.join(indexed, "manifest.json"), os.path.join(indexed, "index.arrow")
    if change == "manifest edited":
        m = json.load(open(mp))
        m["shards"][0]["rows"] += 0  # same value: the bytes change through formatting
        m["totals"]["documents"] += 1  # and a value a reader would see
        json.dump(m, open(mp, "w"))
    elif change == "index garbage":
        open(ip, "wb").write(os.urandom(3000))
    elif change == "index cut":
        data = open(ip, "rb").read()
        open(ip, "wb").write(data[: len(data) // 2])
    else:
        m = json.load(open(mp))
        m["shards"] = m["shards"][:1]
        other = tmp_path / "other"
        other.mkdir()
        S.write_manifest(storage_for(str(other)), m)
        os.replace(other / "index.arrow", ip)
    x = S.open_index(storage_for(indexed))
    assert not x.from_index
    assert x.head["totals"] == json.load(open(mp))["totals"]


def test_a_matching_index_with_a_bad_head_is_refused_as_the_manifest_would_be(indexed):
    """The stamp matches, so the manifest says the same: refused, naming it."""
    store = storage_for(indexed)
    m = S.read_manifest(store)
    m["seq_len"] = 10**12
    data = S.index.index_bytes(m, b"x")  # stamped with bytes we then write as the manifest
    store.put("index.arrow", data)
    store.put("manifest.json", b"x")
    with pytest.raises(ShardError, match=r"manifest.json: malformed manifest \(seq_len"):
        S.open_index(store)


def test_outside_paths_are_found_in_the_column(indexed):
    store = storage_for(indexed)
    m = S.read_manifest(store)
    for bad in ("../x.arrow", "/etc/passwd", "shards/../../x", "a\\b", ""):
        m["shards"][1]["path"] = bad
        x = S.ShardIndex(S.index_table(m), m, "test")
        assert x.outside() == bad, bad
    m["shards"][1]["path"] = "shards/..x.arrow"  # a name, not a parent
    assert S.ShardIndex(S.index_table(m), m, "test").outside() is None


def test_writing_the_index_imports_no_pandas(sample_build):
    """The index and its row layout are built from buffers: ``pa.array`` of Python lists or NumPy
    arrays imports pandas where it is installed (0.3-0.5 s at the end of every build)."""
    import subprocess
    import sys

    pytest.importorskip("pandas")  # where pandas is absent nothing could import it
    code = ("import sys; from packer import shards as S; from packer.io import storage_for; "
            f"S.write_manifest(storage_for({str(sample_build)!r}), S.read_manifest(storage_for({str(sample_build)!r}))); "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_packer_index_writes_the_index_a_build_would_have_written(indexed, tmp_path):
    """An older build (no index) and a manifest edited by hand get their index back, the manifest untouched."""
    import warnings

    from packer import PackedDataset
    from tests._cli import cli

    ip, mp = os.path.join(indexed, "index.arrow"), os.path.join(indexed, "manifest.json")
    made, n = open(ip, "rb").read(), S.open_index(storage_for(indexed)).n
    os.unlink(ip)
    r = cli("index", indexed, "-q")
    assert r.returncode == 0 and f"for {n:,} shard(s)" in r.stderr, r.stderr
    assert open(ip, "rb").read() == made  # byte for byte
    edited = json.dumps(json.load(open(mp)), indent=1).encode()  # the same manifest, other bytes
    open(mp, "wb").write(edited)
    assert not S.open_index(storage_for(indexed)).from_index
    assert cli("index", indexed, "-q").returncode == 0
    assert open(mp, "rb").read() == edited and S.open_index(storage_for(indexed)).from_index
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # opening with the index: no warning
        PackedDataset(indexed)


def test_opening_many_shards_without_the_index_warns_and_names_the_fix(indexed, monkeypatch):
    from packer import PackedDataset

    os.unlink(os.path.join(indexed, "index.arrow"))
    monkeypatch.setattr(S.index, "SLOW_LIST", 2)
    with pytest.warns(UserWarning, match=r"`packer index .*` writes the index"):
        PackedDataset(indexed)


def test_packer_index_refuses_a_running_build_and_a_folder_that_is_not_one(indexed, tmp_path):
    from packer.io.lock import OutLock
    from tests._cli import cli, one_line

    lock = OutLock(indexed).acquire()  # as a build running there holds it
    lock.record("0" * 16)
    try:
        r = cli("index", indexed)
        assert r.returncode == 2 and one_line(r, "a build is running there", str(os.getpid()))
    finally:
        lock.release(True)
    r = cli("index", str(tmp_path / "nope"))
    assert r.returncode == 2 and one_line(r, "no such build folder")
    (tmp_path / "empty").mkdir()
    r = cli("index", str(tmp_path / "empty"))
    assert r.returncode == 2 and one_line(r, "not a packer build")
