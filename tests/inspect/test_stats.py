"""``packer stats``: every kind of damage is caught and named; figures agree with the shards."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

from packer import shards as S
from packer.io import write_json

from tests.conftest import invoke as run
from packer.inspect.stats import Dist, check, figures




def manifest(out) -> dict:
    with open(os.path.join(out, S.MANIFEST)) as f:
        return json.load(f)


def save_manifest(out, m) -> None:
    write_json(os.path.join(out, S.MANIFEST), m)


def shard_path(out, i=0) -> str:
    return os.path.join(out, manifest(out)["shards"][i]["path"])


def problems(res) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.startswith("packer: problem:")]


def assert_caught(res, shard: str, *words):
    """Exit 1, and some problem line names ``shard`` and every one of ``words``."""
    assert res.exit_code == 1, res.output
    lines = problems(res)
    hits = [ln for ln in lines if shard in ln and all(w in ln for w in words)]
    assert hits, f"no problem line names {shard} and {words}: {lines}"
    return lines


# --------------------------------------------------------------------------
# Rewriting a shard with chosen content (and a matching checksum, so that the
# specific check is what fires, not the checksum).


def read_columns(path, seq_len):
    t = pa.ipc.open_file(pa.memory_map(path)).read_all().combine_chunks()
    ids = t.column("input_ids").chunk(0).flatten().to_numpy().copy()
    lists = {}
    for name in ("doc_lens", "doc_index", "doc_offset"):
        col = t.column(name).chunk(0)
        lists[name] = [np.asarray(col.offsets).copy(), col.values.to_numpy().copy()]
    return ids, lists


def copied_columns(sample_build, copy_build, shard):
    """A copy of the build to damage: (its folder, its manifest, the ids and list columns of ``shard``)."""
    out = copy_build(sample_build)
    m = manifest(out)
    ids, lists = read_columns(shard_path(out, shard), m["seq_len"])
    return out, m, ids, lists


def write_shard(out, i, ids, lists, seq_len, fix_checksum=True):
    """Write shard ``i`` from arrays, batches of 1024 rows like packer's; update its manifest entry."""
    m = manifest(out)
    entry = m["shards"][i]
    arrays = [pa.FixedSizeListArray.from_arrays(pa.array(ids), seq_len)]
    for name in ("doc_lens", "doc_index", "doc_offset"):
        off, val = lists[name]
        arrays.append(pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), pa.array(val, pa.uint32())))
    table = pa.Table.from_arrays(arrays, schema=S.schema(seq_len, str(ids.dtype)))
    data = S.table_bytes(table)
    with open(os.path.join(out, entry["path"]), "wb") as f:
        f.write(data)
    if fix_checksum:
        entry["bytes"] = len(data)
        entry[S.CHECKSUM] = S.checksum(data)
        save_manifest(out, m)


# --------------------------------------------------------------------------
# A clean build.


def independent_doc_lengths(out) -> np.ndarray:
    """Every document's length, from the shards with pyarrow alone."""
    m = manifest(out)
    lengths = []
    for e in m["shards"]:
        t = pa.ipc.open_file(pa.memory_map(os.path.join(out, e["path"]))).read_all()
        docs = np.concatenate([c.values.to_numpy() for c in t.column("doc_index").chunks])
        lens = np.concatenate([c.values.to_numpy() for c in t.column("doc_lens").chunks])
        per_doc = {}
        for d, n in zip(docs.tolist(), lens.tolist()):
            per_doc[d] = per_doc.get(d, 0) + n
        lengths.extend(per_doc.values())
    return np.array(lengths)


@pytest.mark.parametrize("which", ["sample_build", "sample_build_gpt2"])
def test_clean_build_passes_and_json_agrees_with_manifest(which, request):
    out = request.getfixturevalue(which)
    res = run("stats", out, "--json")
    assert res.exit_code == 0, res.stderr
    fig = json.loads(res.stdout)
    m = manifest(out)
    t = m["totals"]
    assert fig["ok"] is True and fig["problems"] == [] and fig["verified"] is True
    assert fig["measured_from"] == "shards"
    for k in ("documents", "tokens", "rows", "slots", "padding", "pieces", "documents_split"):
        assert fig[k] == t[k], k
    assert fig["padding_pct"] == pytest.approx(t["padding_pct"], abs=1e-4)
    assert fig["skipped"] == t["skipped"] and fig["skipped_total"] == sum(t["skipped"].values())
    assert fig["tokenizer"] == m["tokenizer"] and fig["seq_len"] == m["seq_len"] and fig["dtype"] == m["dtype"]
    assert [s["path"] for s in fig["shards"]] == [e["path"] for e in m["shards"]]
    assert [s["tokens"] for s in fig["shards"]] == [e["tokens"] for e in m["shards"]]
    assert fig["tokens_per_shard"]["max"] == max(e["tokens"] for e in m["shards"])
    # rows counted by fill and by pieces add up to every row
    assert sum(fig["row_fill"]["histogram_pct"].values()) == t["rows"]
    assert sum(fig["pieces_per_row"]["histogram"].values()) == t["rows"]
    assert sum(int(k) * v for k, v in fig["pieces_per_row"]["histogram"].items()) == t["pieces"]
    # document lengths: exact nearest-rank percentiles of an independent computation
    lengths = independent_doc_lengths(out)
    dl = fig["doc_length"]
    assert dl["documents"] == t["documents"] == len(lengths)
    assert lengths.sum() == t["tokens"]
    for p in (50, 90, 99):
        assert dl[f"p{p}"] == int(np.percentile(lengths, p, method="inverted_cdf")), p
    assert dl["max"] == lengths.max() and dl["min"] == lengths.min()


def test_table_on_terminal(sample_build):
    res = run("stats", sample_build)
    assert res.exit_code == 0, res.stderr
    m = manifest(sample_build)
    assert f"{m['totals']['tokens']:,}" in res.stdout
    for word in ("documents", "padding", "documents split", "pieces per row", "p50", "p99", "tokenizer", "skipped"):
        assert word in res.stdout
    for reason in m["totals"]["skipped"]:
        assert reason in res.stdout
    assert res.stdout.rstrip().endswith("OK")


def test_no_verify_gives_the_same_figures(sample_build):
    deep = figures(check(sample_build, deep=True))
    shallow = figures(check(sample_build, deep=False))
    deep.pop("verified"), shallow.pop("verified")
    assert deep == shallow


def test_no_verify_skips_checksums_but_not_missing_shards(sample_build, copy_build):
    out = copy_build(sample_build)
    path = shard_path(out, 1)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))
    assert run("stats", out, "--no-verify").exit_code == 0  # as documented: no checksum
    assert_caught(run("stats", out), "000001.arrow", "checksum")
    os.unlink(path)
    assert_caught(run("stats", out, "--no-verify"), "000001.arrow", "missing")


# --------------------------------------------------------------------------
# Each kind of damage, caught and named.


def token_data_range(path):
    """(start, end) byte offsets of the input_ids values inside the shard file (first batch)."""
    data = open(path, "rb").read()
    buf = pa.py_buffer(data)
    b = pa.ipc.open_file(pa.BufferReader(buf)).get_batch(0)
    vals = b.column("input_ids").values.buffers()[1]
    start = vals.address - buf.address
    return start, start + vals.size


def test_flipped_byte_in_token_data(sample_build, copy_build):
    out = copy_build(sample_build)
    path = shard_path(out, 2)
    start, end = token_data_range(path)
    data = bytearray(open(path, "rb").read())
    pos = start + ((start + end) // 2 - start) // 2 * 2  # low byte of a token
    data[pos] ^= 0x01  # the id changes by one and stays < 256: only the checksum can tell
    open(path, "wb").write(bytes(data))
    assert_caught(run("stats", out), "shards/000002.arrow", "checksum")


def test_any_flipped_byte_is_caught_without_traceback(sample_build, copy_build):
    """Flip one byte anywhere (header, metadata, tokens, piece lists, footer): always named, never a crash."""
    out = copy_build(sample_build)
    path = shard_path(out, 4)
    orig = open(path, "rb").read()
    rng = random.Random(5)
    positions = [0, 5, 8, 20, len(orig) - 1, len(orig) - 8, len(orig) - 200] + rng.sample(range(len(orig)), 25)
    for pos in positions:
        data = bytearray(orig)
        data[pos] ^= 1 << rng.randrange(8)
        open(path, "wb").write(bytes(data))
        rep = check(out)
        assert not rep.ok, pos
        kinds = {p.kind for p in rep.problems if p.path == "shards/000004.arrow"}
        assert "checksum" in kinds, (pos, rep.problem_lines())
        figures(rep)  # figures of a damaged build still come out
    open(path, "wb").write(orig)
    assert check(out).ok


def test_truncated_shard(sample_build, copy_build):
    out = copy_build(sample_build)
    path = shard_path(out, 1)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    assert_caught(run("stats", out), "shards/000001.arrow", "truncated")


def test_truncated_shard_with_fixed_manifest_is_unreadable(sample_build, copy_build):
    """The size and checksum are made to match: the Arrow parse itself must catch the cut."""
    out = copy_build(sample_build)
    path = shard_path(out, 1)
    data = open(path, "rb").read()[:-1000]
    open(path, "wb").write(data)
    m = manifest(out)
    m["shards"][1].update(bytes=len(data), **{S.CHECKSUM: S.checksum(data)})
    save_manifest(out, m)
    lines = assert_caught(run("stats", out), "shards/000001.arrow", "Arrow")
    assert not any("checksum" in ln for ln in lines)


def test_deleted_shard(sample_build, copy_build):
    out = copy_build(sample_build)
    os.unlink(shard_path(out, 3))
    res = run("stats", out)
    assert_caught(res, "shards/000003.arrow", "missing")
    assert "manifest" in res.stdout or "documents" in res.stdout  # figures still printed


def test_extra_files(sample_build, copy_build):
    out = copy_build(sample_build)
    with open(os.path.join(out, "shards", "000099.arrow"), "wb") as f:
        f.write(open(shard_path(out, 0), "rb").read())
    with open(os.path.join(out, "notes.txt"), "w") as f:
        f.write("hi")
    with open(os.path.join(out, "shards", ".tmp-x-000005.arrow"), "w") as f:
        f.write("half")
    res = run("stats", out)
    assert_caught(res, "shards/000099.arrow", "extra", "not in the manifest")
    assert_caught(res, "notes.txt", "extra")
    assert_caught(res, ".tmp-x-000005.arrow", "temp file")
    assert len(problems(res)) == 3


@pytest.mark.parametrize("key", ["rows", "tokens", "pieces", "documents", "documents_split", "padding"])
def test_manifest_shard_count_changed(sample_build, copy_build, key):
    out = copy_build(sample_build)
    m = manifest(out)
    m["shards"][2][key] += 1
    save_manifest(out, m)
    res = run("stats", out)
    assert_caught(res, "shards/000002.arrow", key, "manifest says")
    assert_caught(res, "manifest.json", f"totals.{key}")


def test_manifest_totals_changed(sample_build, copy_build):
    out = copy_build(sample_build)
    m = manifest(out)
    m["totals"]["documents"] -= 1
    save_manifest(out, m)
    assert_caught(run("stats", out), "manifest.json", "totals.documents")


def test_token_id_at_vocab_size(sample_build, copy_build):
    out, m, ids, lists = copied_columns(sample_build, copy_build, 1)
    seq_len, vocab = m["seq_len"], m["vocab_size"]
    ids[7 * seq_len + 3] = vocab  # fits uint16, outside the vocabulary
    write_shard(out, 1, ids, lists, seq_len)
    lines = assert_caught(run("stats", out), "shards/000001.arrow", "row 7 slot 3", f"token id {vocab}", "vocab_size")
    assert not any("checksum" in ln for ln in lines)
    assert len(lines) == 1


def test_doc_lens_past_seq_len(sample_build, copy_build):
    out, m, ids, lists = copied_columns(sample_build, copy_build, 0)
    seq_len = m["seq_len"]
    off, lens = lists["doc_lens"]
    r = 11
    lens[off[r + 1] - 1] += seq_len  # the row's last piece grows past the end of the row
    write_shard(out, 0, ids, lists, seq_len)
    lines = assert_caught(run("stats", out), "shards/000000.arrow", f"row {r}", "more than seq_len")
    assert not any("checksum" in ln for ln in lines)


def test_padding_slot_not_pad(sample_build, copy_build):
    out, m, ids, lists = copied_columns(sample_build, copy_build, 0)
    seq_len = m["seq_len"]
    off, lens = lists["doc_lens"]
    fill = np.add.reduceat(lens, off[:-1])
    r = int(np.nonzero(fill < seq_len)[0][0])
    ids[r * seq_len + seq_len - 1] = 65  # "A" where the pad id belongs
    write_shard(out, 0, ids, lists, seq_len)
    lines = assert_caught(run("stats", out), "shards/000000.arrow", f"row {r} slot {seq_len - 1}", "pad_id")
    assert len(lines) == 1


def test_pieces_that_do_not_tile_their_document(sample_build, copy_build):
    out, m, ids, lists = copied_columns(sample_build, copy_build, 0)
    seq_len = m["seq_len"]
    docs, offs = lists["doc_index"][1], lists["doc_offset"][1]
    p = int(np.nonzero(offs > 0)[0][0])  # a later piece of a split document
    offs[p] += 1
    write_shard(out, 0, ids, lists, seq_len)
    assert_caught(run("stats", out), "shards/000000.arrow", f"document {docs[p]}", "offset")


def test_schema_seq_len_and_dtype_mismatch(sample_build, copy_build):
    out = copy_build(sample_build)
    m = manifest(out)
    m["seq_len"] = 512
    m["totals"]["slots"] = m["totals"]["rows"] * 512
    save_manifest(out, m)
    res = run("stats", out)
    for i in range(len(m["shards"])):
        assert_caught(res, f"shards/00000{i}.arrow", "input_ids", "seq_len 512")
    m["seq_len"] = 256
    m["totals"]["slots"] = m["totals"]["rows"] * 256
    m["dtype"] = "uint32"
    save_manifest(out, m)
    assert_caught(run("stats", out), "shards/000000.arrow", "input_ids", "uint32")


def test_garbage_shard_with_matching_checksum(sample_build, copy_build):
    out = copy_build(sample_build)
    m = manifest(out)
    data = os.urandom(5000)
    open(os.path.join(out, m["shards"][0]["path"]), "wb").write(data)
    m["shards"][0].update(bytes=len(data), **{S.CHECKSUM: S.checksum(data)})
    save_manifest(out, m)
    assert_caught(run("stats", out), "shards/000000.arrow", "not an Arrow")


@pytest.mark.parametrize("damage", ["not json", "no manifest", "missing key"])
def test_unreadable_manifest_is_one_line(sample_build, copy_build, damage):
    out = copy_build(sample_build)
    path = os.path.join(out, S.MANIFEST)
    if damage == "not json":
        open(path, "w").write("{ nope")
    elif damage == "no manifest":
        os.unlink(path)
    else:
        m = manifest(out)
        del m["shards"][0]["rows"]
        save_manifest(out, m)
    res = run("stats", out)
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packer: error:"), lines
    assert "manifest.json" in lines[0]


def test_not_a_folder(tmp_path):
    res = run("stats", str(tmp_path / "nope"))
    assert res.exit_code == 2 and "no such build folder" in res.stderr


def test_json_lists_problems(sample_build, copy_build):
    out = copy_build(sample_build)
    os.unlink(shard_path(out, 3))
    res = run("stats", out, "--json")
    assert res.exit_code == 1
    fig = json.loads(res.stdout)
    assert fig["ok"] is False and fig["measured_from"] == "manifest"
    assert {"path": "shards/000003.arrow", "kind": "missing"}.items() <= fig["problems"][0].items()


# --------------------------------------------------------------------------
# --plot


def test_plot_writes_png(sample_build, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "stats.png"
    res = run("stats", sample_build, "--no-verify", "--plot", str(png))
    assert res.exit_code == 0, res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_so(sample_build, tmp_path, monkeypatch):
    for name in [k for k in sys.modules if k == "matplotlib" or k.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    res = run("stats", sample_build, "--plot", str(tmp_path / "x.png"))
    assert res.exit_code == 2
    assert "matplotlib" in res.stderr and "pip install" in res.stderr
    assert not (tmp_path / "x.png").exists()


# --------------------------------------------------------------------------
# Exact percentiles.


def test_dist_matches_numpy_nearest_rank():
    rng = np.random.default_rng(0)
    d = Dist()
    all_ = []
    for _ in range(20):
        chunk = rng.integers(1, rng.integers(2, 5000), size=rng.integers(0, 300))
        d.add(chunk)
        all_.append(chunk)
    all_ = np.concatenate(all_)
    assert d.n == len(all_)
    for p in (0.1, 1, 50, 90, 99, 99.9, 100):
        assert d.percentile(p) == int(np.percentile(all_, p, method="inverted_cdf")), p
    assert d.mean() == pytest.approx(all_.mean())
    assert Dist().percentile(50) is None


def test_shard_path_outside_the_build(sample_build, copy_build):
    out = copy_build(sample_build)
    m = manifest(out)
    m["shards"][0]["path"] = "../../etc/passwd"
    save_manifest(out, m)
    res = run("stats", out)
    assert_caught(res, "../../etc/passwd", "outside the build folder")
    assert_caught(res, "shards/000000.arrow", "extra")  # the real file is now unaccounted for


def test_workers_give_the_same_report(sample_build, copy_build):
    """--workers N checks shards in processes: the same figures and the same problems, in manifest order."""
    out = copy_build(sample_build)
    with open(shard_path(out, 1), "r+b") as f:
        f.seek(5000)
        f.write(b"\xff\xff")
    os.truncate(shard_path(out, 3), 1000)
    one, four = run("stats", out, "--json"), run("stats", out, "--json", "--workers", "4")
    assert one.exit_code == four.exit_code == 1
    assert json.loads(one.stdout) == json.loads(four.stdout)
    assert one.stderr == four.stderr and "000001.arrow" in one.stderr and "000003.arrow" in one.stderr
    assert run("stats", sample_build, "--workers", "3").exit_code == 0


def test_workers_0_checks_with_one_process_per_cpu_this_process_may_use(sample_build, monkeypatch):
    """--workers 0: the CPUs of packer/io/cpus.py (affinity, cgroup quota), not the host's cores (issue 39.4)."""
    from packer.inspect import stats as st
    from packer.io.cpus import CpuLimit

    used = []
    real = st._in_processes
    monkeypatch.setattr(st, "cpu_limit", lambda: CpuLimit(3, "a test's quota"))
    monkeypatch.setattr(st.procs, "can_fork", lambda *a, **k: True)  # (a thread an earlier test left must not send it to threads)
    monkeypatch.setattr(st, "_in_processes", lambda entries, workers, *a: used.append(workers) or real(entries, workers, *a))
    assert run("stats", sample_build, "--workers", "0").exit_code == 0
    assert used == [3]
    assert run("stats", sample_build, "--workers", "-1").exit_code == 2


def test_workers_in_threads_where_no_fork_give_the_same_report(sample_build, monkeypatch):
    """Another thread running (a notebook, a trainer): --workers checks in threads, the same report."""
    import packer.inspect.stats as st
    from packer.inspect.figures import to_json

    forked = to_json(figures(check(sample_build, workers=3)))
    monkeypatch.setattr(st.procs, "can_fork", lambda: False)
    monkeypatch.setattr(st, "_in_processes", None)  # (would fail if called)
    assert to_json(figures(check(sample_build, workers=3))) == forked == to_json(figures(check(sample_build)))


# --------------------------------------------------------------------------
# Many shards (issue 31.1): the same report, streamed (manifest in slices, rows spooled).


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """A build of 1,100 shards (more than one spool slice and one JSON slice): hard links of one small shard."""
    from packer import BuildConfig, build
    from tests.conftest import load_script

    root = tmp_path_factory.mktemp("many")
    with open(root / "in.jsonl", "w") as f:
        f.writelines(json.dumps({"text": f"document {i} " * (i % 7 + 1)}) + "\n" for i in range(40))
    build(BuildConfig.of(inputs=(str(root / "in.jsonl"),), out=str(root / "src"), seq_len=64, workers=1, quiet=True))
    return load_script("bench/open_scale.py").make_build(str(root / "src"), str(root / "out"), 1100, shard=0)


def _expected_json(fig: dict) -> str:
    """The document as it was printed before the shard list was streamed: json.dumps of the whole dict."""
    return json.dumps({**fig, "shards": list(fig["shards"])}, indent=1)


def test_a_many_shard_build_gives_the_report_it_always_gave(many):
    from packer.inspect.figures import to_json

    m = manifest(many)
    rep = check(many, workers=2)
    assert rep.ok, rep.problem_lines()[:3]
    fig = figures(rep)
    want = [{k: e[k] for k in ("path", "unit", "bytes", "rows", "tokens", "documents")} for e in m["shards"]]
    assert list(fig["shards"]) == want and len(fig["shards"]) == 1100
    for k in ("documents", "tokens", "rows", "padding", "pieces", "documents_split"):
        assert fig[k] == m["totals"][k], k
    e = m["shards"][0]
    assert fig["tokens_per_shard"] == {"min": e["tokens"], "mean": float(e["tokens"]), "max": e["tokens"]}
    text = to_json(fig)
    assert text == _expected_json(fig) and json.loads(text)["shards"] == want
    assert to_json(figures(check(many))) == text  # one thread, the same document
    res = run("stats", many, "--json", "-q")
    assert res.exit_code == 0 and res.stdout == text + "\n"


def test_problems_of_a_many_shard_build_are_named_in_order(many, tmp_path):
    import shutil

    out = str(tmp_path / "b")
    shutil.copytree(many, out)
    m = manifest(out)
    os.unlink(os.path.join(out, m["shards"][1050]["path"]))
    for name in ("shards/zz.arrow", "shards/.tmp-x", "aa.txt"):
        open(os.path.join(out, name), "w").close()
    rep = check(out, deep=False)
    assert [(p.path, p.kind) for p in rep.problems] == [
        (m["shards"][1050]["path"], "missing"), ("aa.txt", "extra"), ("shards/.tmp-x", "extra"), ("shards/zz.arrow", "extra")]
    fig = figures(rep)
    assert fig["measured_from"] == "manifest" and fig["shards_measured"] == 1099
    assert _expected_json(fig) == json.dumps(json.loads(_expected_json(fig)), indent=1)


def test_memory_does_not_grow_with_the_shard_count(many, tmp_path, monkeypatch):
    """Python allocations at the peak of check() over 1,100 shards against 300 of the same (both past one
    spool slice, the manifest read in blocks of 16 KiB, smaller than both): the difference is what is kept
    per shard (16 bytes of names' hashes), not objects or lists."""
    import tracemalloc

    import packer.shards.manifest_stream as ms

    monkeypatch.setattr(ms, "BLOCK", 1 << 14)
    from tests.conftest import load_script

    src = os.path.join(os.path.dirname(many), "src")
    small = load_script("bench/open_scale.py").make_build(src, str(tmp_path / "small"), 300, shard=0)
    peaks = {}
    for name, out in (("small", small), ("many", many)):
        check(out, deep=False)  # (first-call caches out of the way)
        tracemalloc.start()
        check(out, deep=False)
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks["many"] - peaks["small"] < 100 * 800, peaks  # ~54 B (hashes, sorted once); was ~1.5 kB: entries, figures, listing


# --------------------------------------------------------------------------
# --workers under signals (issue 41.5): the checkers share the build's signal path (packer/procs.py).

@pytest.fixture(scope="module")
def sixteen_shards(tmp_path_factory):
    """A build of 16 shards: under the ``slow`` fault each takes a checker 2 s, so 4 checkers are busy ~8 s."""
    from packer import BuildConfig, build

    from tests.conftest import write_jsonl

    root = tmp_path_factory.mktemp("signals")
    src = write_jsonl(root / "in.jsonl", [f"document {i} " + "lorem ipsum " * (i % 40 + 1) for i in range(3200)])
    out = str(root / "out")
    build(BuildConfig.of(inputs=(src,), out=out, seq_len=128, workers=1, unit_bytes=12_000, quiet=True))
    assert len(os.listdir(os.path.join(out, "shards"))) >= 16
    return out


def _slow_stats(out):
    """``packer stats --workers 4`` with 2 s a shard, once its 4 checkers run; (process, checker pids)."""
    from tests.pipeline.engines.test_local import alive, children

    p = subprocess.Popen([sys.executable, "-m", "packer.cli", "stats", out, "--workers", "4", "-q"],
                         start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PACKER_FAULT": "slow"})
    deadline = time.time() + 120
    while time.time() < deadline:
        kids = children(p.pid) if alive(p.pid) else set()
        if len(kids) >= 4:
            return p, kids
        time.sleep(0.05)
    p.kill()
    raise AssertionError(f"the checkers did not start: {p.communicate()}")


def _gone(pids, seconds=60.0) -> set:
    from tests.pipeline.engines.test_local import wait_gone

    return wait_gone(pids, seconds)


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process state from /proc")


@needs_proc
@pytest.mark.slow
def test_ctrl_c_to_the_group_stops_every_checker_in_one_line(sixteen_shards):
    p, kids = _slow_stats(sixteen_shards)
    os.killpg(p.pid, signal.SIGINT)  # what the terminal sends: every checker gets it too
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err and err.strip() == "packer: interrupted", err
    assert not _gone(kids), "checkers outlived packer stats"


@needs_proc
@pytest.mark.slow
def test_a_second_ctrl_c_to_the_main_process_kills_the_checkers(sixteen_shards):
    """Ctrl-C to the main process alone: it tells the checkers; a second one does not wait for them."""
    p, kids = _slow_stats(sixteen_shards)
    os.kill(p.pid, signal.SIGINT)
    time.sleep(0.1)
    os.kill(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "Traceback" not in err, err
    assert not _gone(kids), "checkers outlived packer stats"


@needs_proc
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_checker_outlives_the_main_process(sixteen_shards, sig):
    p, kids = _slow_stats(sixteen_shards)
    os.kill(p.pid, sig)  # the main process alone: its checkers die with it (PR_SET_PDEATHSIG)
    p.communicate(timeout=120)
    assert p.returncode == -sig
    assert not _gone(kids), "checkers outlived packer stats"


@needs_proc
@pytest.mark.slow
def test_a_killed_checker_is_one_line(sixteen_shards):
    p, kids = _slow_stats(sixteen_shards)
    os.kill(min(kids), signal.SIGKILL)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and "a checker process died" in err and "Traceback" not in err, err
    assert not _gone(kids)


@needs_proc
@pytest.mark.slow
def test_a_stopped_checker_is_one_line_not_a_hang(sixteen_shards):
    """Two looks 5 s apart find it stopped: one line naming it, every checker gone (bounded by events, not a clock)."""
    p, kids = _slow_stats(sixteen_shards)
    victim = min(kids)
    os.kill(victim, signal.SIGSTOP)
    try:
        _, err = p.communicate(timeout=180)
    finally:
        if _gone([victim], 0):
            os.kill(victim, signal.SIGKILL)
    assert p.returncode == 2, err
    assert f"checker process {victim} is stopped" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not _gone(kids)


def test_stats_of_a_build_with_a_holdout_counts_every_shard_it_verified(tmp_path):
    """Issue 55.8: the holdout's shards are verified too, and counted in "verified N shard(s)"."""
    from packer import build

    out = str(tmp_path / "o")
    m = build(["sample_data"], out, seq_len=256, unit_mb=0.5, holdout=0.2, workers=1, quiet=True).manifest
    held = manifest(os.path.join(out, "holdout"))
    n = len(m["shards"]) + len(held["shards"])
    assert len(held["shards"]) >= 1 and n > len(m["shards"])
    for args in ([], ["--no-verify"]):
        res = run("stats", out, *args)
        assert res.exit_code == 0, res.output
        assert f"verified {n} shard(s)" in res.output or f"piece columns of {n} shard(s)" in res.output
