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
    if change in ("index garbage", "index cut"):  # damaged, not stale: one warning, naming the file
        with pytest.warns(UserWarning, match=r"index\.arrow: damaged shard index \(unreadable"):
            x = S.open_index(storage_for(indexed))
    else:  # another manifest's index (a stale cache): silently the manifest
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


# --------------------------------------------------------------------------
# A damaged index (issue 41.2, 41.3): refused in one line, or the manifest read with one warning.


def _stamped(out: str, table: pa.Table) -> None:
    """index.arrow replaced by ``table`` (keeping its metadata: still stamped with manifest.json's hash)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=max(1, table.num_rows))
    storage_for(out).put(S.INDEX, sink.getvalue())


def _table(out: str) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(open(os.path.join(out, S.INDEX), "rb").read())).read_all()


def test_an_index_cut_by_its_last_row_is_ignored_with_one_warning_and_stats_says_so(indexed):
    """Rewritten without its last row, metadata kept (so its stamp still matches the manifest): the
    counts no longer sum to the manifest's totals. PackedDataset(verify=True) reads every row from the
    manifest, with one warning; ``packer stats`` reports the index (it said OK before)."""
    from packer import PackedDataset

    from tests.conftest import invoke

    rows = json.load(open(os.path.join(indexed, "manifest.json")))["totals"]["rows"]
    t = _table(indexed)
    _stamped(indexed, t.slice(0, t.num_rows - 1))
    with pytest.warns(UserWarning, match=r"index\.arrow: damaged shard index \(its [\d,]+ shards hold [\d,]+ rows, the manifest's "
                                         r"totals say [\d,]+\): ignored") as w:
        ds = PackedDataset(indexed, verify=True)
    assert len(w) == 1 and len(ds) == rows
    assert ds.batch(range(rows - 3, rows))["input_ids"].shape[0] == 3
    res = invoke("stats", indexed)
    assert res.exit_code == 1 and "index.arrow: damaged shard index" in res.stderr + res.stdout


def test_an_index_with_a_null_count_is_ignored_not_a_name_error(indexed):
    """ShardIndex._load named an undefined ``source`` for such an index (a NameError traceback)."""
    t = _table(indexed)
    rows = pa.array([None] + t.column("rows").to_pylist()[1:], pa.int64())
    _stamped(indexed, t.set_column(t.schema.get_field_index("rows"), pa.field("rows", pa.int64()), rows))
    with pytest.warns(UserWarning, match=r"damaged shard index \(column rows holds nulls\)"):
        x = S.open_index(storage_for(indexed))
    assert not x.from_index and x.total_rows == json.load(open(os.path.join(indexed, "manifest.json")))["totals"]["rows"]


_FUZZ = r'''
import os, sys, warnings
import pyarrow as pa
from packer import PackedDataset, shards as S
from packer.errors import ShardError
from packer.inspect.show import read_row
from packer.io import storage_for

out, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store, ip = storage_for(out), os.path.join(out, S.INDEX)
good = open(ip, "rb").read()
good_table = pa.ipc.open_file(pa.py_buffer(good)).read_all()  # in memory: the file is replaced below

def rows(verify):
    ds = PackedDataset(out, verify=verify)
    b = ds.batch(range(len(ds)))
    views = [read_row(out, r) for r in (0, len(ds) - 1)]
    return (len(ds), *(b[k].numpy().tobytes() for k in ("input_ids", "labels", "position_ids")),
            [[(p.doc, p.offset, p.ids.tobytes()) for p in v.pieces] for v in views])

want = rows(False)
for i in range(lo, hi):
    bad = bytearray(good)
    bad[i] ^= 0xFF
    with open(ip + ".tmp", "wb") as f:
        f.write(bad)
    os.replace(ip + ".tmp", ip)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            x = S.open_index(store)
            if not x.from_index:
                res = "manifest"  # read from the manifest: its rows (tests above)
            elif x.table.equals(good_table, check_metadata=True):
                res = "same"  # damage where no reader looks (the stream's schema message, padding)
            else:  # read from a damaged index: every row, checked (verify on every other case)
                res = "rows" if rows(i % 2 == 1) == want else "WRONG ROWS"
        except ShardError as e:
            res = "error" if "\n" not in str(e) else "MULTI-LINE ERROR"
        except Exception as e:
            res = f"TRACEBACK {type(e).__name__}: {str(e)[:200]}"
    if len(w) > 3:  # at most one per reader opened (open_index, PackedDataset, two read_row)
        res += f" and {len(w)} warnings"
    print(i, res, flush=True)
'''


def test_every_byte_of_a_small_index_flipped_gives_one_line_or_the_right_rows(tmp_path):
    """Each byte of a two-shard build's index.arrow flipped in turn (XOR 0xFF), read by open_index,
    PackedDataset (with and without verify) and packer show's read_row: one ShardError line, or every
    row right (from the manifest, with one warning, or from the index); never a traceback or other
    rows. Cases run in child processes, two at once, so a segfault is caught (and named) too.
    On 0a283c5: 61 tracebacks (NameError, IndexError, ...) then a segfault."""
    import random
    import subprocess
    import sys

    from packer import BuildConfig, build

    from tests.conftest import REPO, write_jsonl

    rng = random.Random(0)
    texts = [" ".join(rng.choice("ab cd efg hij klmno".split()) for _ in range(rng.randint(3, 40))) for _ in range(60)]
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    outs = [str(tmp_path / f"out{j}") for j in range(2)]
    build(BuildConfig.of(inputs=(src,), out=outs[0], seq_len=64, workers=1, unit_bytes=4096))
    import shutil

    shutil.copytree(outs[0], outs[1])
    assert len(os.listdir(os.path.join(outs[0], "shards"))) == 2
    size = os.path.getsize(os.path.join(outs[0], S.INDEX))
    env = {**os.environ, "PYTHONPATH": REPO}
    results: dict[int, str] = {}
    todo = [[0, size // 2], [size // 2, size]]
    while any(a < b for a, b in todo):
        kids = [(j, a, b, subprocess.Popen([sys.executable, "-c", _FUZZ, outs[j], str(a), str(b)], env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                for j, (a, b) in enumerate(todo) if a < b]
        for j, a, b, p in kids:
            stdout, stderr = p.communicate(timeout=600)
            for line in stdout.splitlines():
                i, res = line.split(" ", 1)
                results[int(i)] = res
            done = max([k for k in results if a <= k < b], default=a - 1) + 1
            if p.returncode != 0:
                assert done < b, stderr[-2000:]
                results[done] = f"CRASH (exit {p.returncode})"  # the case the child died on
                done += 1
            todo[j] = [done, b]
    bad = {i: r for i, r in sorted(results.items()) if r not in ("manifest", "same", "rows", "error")}
    assert len(results) == size and not bad, f"{len(bad)} of {size} cases: {dict(list(bad.items())[:10])}"
    kinds = set(results.values())
    assert {"manifest", "same", "error"} <= kinds, kinds  # the damage reached each path
