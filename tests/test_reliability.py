"""Shared clusters, signals, hostile files and user mistakes (issue 17): nothing lost, nothing mixed.

One test (or a few) per numbered item of the issue; docs/reliability.md lists
each guarantee beside the test that holds it.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from packer import build
from packer import shards as S
from packer.errors import PackerError, ShardError
from packer.formats import discover, plan_slices, read_slice
from packer.formats.base import Document, Skip
from packer.io.lock import LOCK_NAME, OutLock

from tests.formats.test_awkward_inputs import jl, run, skipped
from tests.inspect.test_stats import manifest, problems, read_columns, save_manifest, shard_path, write_shard
from tests.conftest import invoke as run_cli

ARGS = ["--seq-len", "128", "--unit-mb", "0.02", "--workers", "1", "-q"]


def cli(*args, env=None, timeout=120, **kw):
    """The CLI in a process (and session) of its own."""
    return subprocess.run([sys.executable, "-m", "packer.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, start_new_session=True, **kw)


def one_line(r, *words):
    """A failure told in one line (``words`` in it), no traceback."""
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1, lines
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    for i in range(4):
        (root / f"{i}.jsonl").write_bytes(jl(*({"text": f"doc {i}-{k} " + "words " * (k % 17)} for k in range(300))))
    return str(root)


# 1. A same-size edit between a kill and --resume is refused.
def test_same_size_edit_between_kill_and_resume_is_refused(tmp_path, corpus):
    out = str(tmp_path / "out")
    r = cli("build", corpus, out, *ARGS, env={"PACKER_FAULT": "write", "PACKER_FAULT_UNIT": "1"})
    assert r.returncode != 0 and not os.path.exists(os.path.join(out, "manifest.json"))
    assert os.path.exists(os.path.join(out, LOCK_NAME)), "a killed build leaves its input stamps"
    p = os.path.join(corpus, "3.jsonl")
    data = open(p, "rb").read()
    edited = data.replace(b"doc 3-", b"DOC 3-")
    assert len(edited) == len(data) and edited != data
    st = os.stat(p)
    with open(p, "wb") as f:
        f.write(edited)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # whatever the clock's granularity
    r = cli("build", corpus, out, *ARGS, "--resume")
    assert r.returncode == 2
    one_line(r, "input files changed", out)
    # Put back as it was (content and time): the resume goes on and finishes.
    with open(p, "wb") as f:
        f.write(data)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    build(corpus, out, seq_len=128, unit_mb=0.02, workers=1, resume=True)
    assert not os.path.exists(os.path.join(out, LOCK_NAME)), "a finished build folder holds only the build"
    assert run_cli("stats", out).exit_code == 0


# 2. A file that shrinks, grows or is rewritten while it is read: counted `truncated`, naming it.
@pytest.mark.parametrize("change", ["shrink", "grow", "rewrite"])
def test_file_changed_while_read_is_counted(tmp_path, change):
    p = tmp_path / "a.jsonl"
    p.write_bytes(jl(*({"text": f"record {k}"} for k in range(20000))))
    found = discover([str(p)])
    size = found.files[0].size
    data = p.read_bytes()
    if change == "shrink":
        p.write_bytes(data[: size // 4])
    elif change == "grow":
        p.write_bytes(data + jl({"text": "appended"}))
    else:
        p.write_bytes(data.replace(b"record 1", b"RECORD 1"))
        os.utime(p, ns=(os.stat(p).st_atime_ns, found.files[0].stamp[0] + 10**9))
    recs = [r for sl, _ in plan_slices(found.files, 1 << 16) for r in read_slice(sl)]
    trunc = [r for r in recs if isinstance(r, Skip) and r.reason == "truncated"]
    assert trunc and all(str(p) in t.where and "changed while it was read" in t.where for t in trunc)
    docs = sum(isinstance(r, Document) for r in recs)
    if change == "shrink":
        assert docs < 20000  # what was lost is not silent: a truncated skip says so


def test_build_counts_a_file_that_shrank_after_discovery(tmp_path, monkeypatch):
    B = sys.modules["packer.pipeline.steps"]  # the build's steps (``packer.build`` names the function)

    root = tmp_path / "in"
    root.mkdir()
    (root / "a.jsonl").write_bytes(jl(*({"text": f"record {k}"} for k in range(4000))))
    (root / "b.txt").write_bytes(b"a text file")
    real = B.discover

    def discover_then_cut(*a, **kw):
        found = real(*a, **kw)
        for name in ("a.jsonl", "b.txt"):
            data = (root / name).read_bytes()
            (root / name).write_bytes(data[: len(data) // 4])
        return found

    monkeypatch.setattr(B, "discover", discover_then_cut)
    res = build(str(root), str(tmp_path / "out"), seq_len=64, workers=1)
    t = res.manifest["totals"]
    assert t["skipped"].get("truncated") == 2, t["skipped"]
    ex = " ".join(t["skipped_examples"]["truncated"])
    assert "a.jsonl" in ex and "b.txt" in ex


# 3. An exclusive lock on OUT: a second build is refused, naming the holder.
def test_second_build_into_a_locked_folder_is_refused(tmp_path, corpus):
    out = str(tmp_path / "out")
    build(corpus, out, seq_len=128, unit_mb=0.02, workers=1)
    assert not os.path.exists(os.path.join(out, LOCK_NAME))
    before = {n: open(os.path.join(out, n), "rb").read() for n in ("manifest.json", "build.json")}
    held = OutLock(out).acquire()  # as a running build holds it
    held.record("x")
    try:
        r = cli("build", corpus, out, "--unit-mb", "0.02", "--workers", "1", "-q", "--overwrite", "--seq-len", "64")
        assert r.returncode == 2
        line = one_line(r, "in use by another packer build", f"pid {os.getpid()}", "started")
        assert os.uname().nodename in line
        after = {n: open(os.path.join(out, n), "rb").read() for n in before}
        assert after == before, "the refused build touched nothing"
    finally:
        held.release(finished=False)
    build(corpus, out, seq_len=64, unit_mb=0.02, workers=1, overwrite=True)


def test_a_refused_build_leaves_no_lock_file_in_a_foreign_folder(tmp_path, corpus):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = cli("build", corpus, str(out), *ARGS)
    assert r.returncode == 2
    assert sorted(os.listdir(out)) == ["notes.txt"]


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


# 5. One schema rule: stats and the dataset accept and refuse the same shards.
def _rewrite(out, transform, compression=None, prefix=b""):
    path = shard_path(out)
    t = pa.ipc.open_file(pa.memory_map(path)).read_all()
    t = transform(t)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(t, max_chunksize=1024)
    data = prefix + sink.getvalue().to_pybytes()
    open(path, "wb").write(data)
    m = manifest(out)
    m["shards"][0].update(bytes=len(data), **{S.CHECKSUM: S.checksum(data)})
    save_manifest(out, m)


@pytest.mark.parametrize("case", ["extra column", "reordered columns"])
def test_stats_and_dataset_both_accept_forward_compatible_shards(sample_build, copy_build, case):
    from packer import PackedDataset

    out = copy_build(sample_build)
    if case == "extra column":
        _rewrite(out, lambda t: t.append_column("score", pa.array(np.zeros(t.num_rows, np.float32))))
    else:
        _rewrite(out, lambda t: t.select(list(reversed(t.column_names))))
    res = run_cli("stats", out)
    assert res.exit_code == 0, res.stderr
    ds = PackedDataset(out, verify=True)
    ref = PackedDataset(sample_build)
    assert len(ds) == len(ref) and bool((ds[0]["input_ids"] == ref[0]["input_ids"]).all())


@pytest.mark.parametrize("case", ["zstd body", "lz4 body", "64 garbage bytes first"])
def test_stats_and_dataset_both_refuse_unmappable_shards(sample_build, copy_build, case):
    from packer import PackedDataset

    out = copy_build(sample_build)
    if case == "64 garbage bytes first":
        _rewrite(out, lambda t: t, prefix=os.urandom(64))
        word = "magic"
    else:
        _rewrite(out, lambda t: t, compression=case.split()[0])
        word = "compressed body"
    res = run_cli("stats", out)
    assert res.exit_code == 1 and any(word in ln for ln in problems(res)), res.stderr
    with pytest.raises(ShardError, match=word):
        PackedDataset(out)[0]  # checked at first use of the shard (opening reads no shard)
    assert run_cli("show", out, "0").exit_code == 1


# 6. SIGTERM to the main process is handled as Ctrl-C: workers gone, resume command printed.
def test_sigterm_stops_cleanly_leaves_no_process_and_says_how_to_resume(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    for i in range(8):
        (root / f"{i}.jsonl").write_bytes(jl(*({"text": "lorem ipsum dolor " * (1 + k % 50)} for k in range(2000))))
    out = str(tmp_path / "out")
    args = ["build", str(root), out, "--seq-len", "256", "--unit-mb", "0.1", "--workers", "2", "-q"]
    p = subprocess.Popen([sys.executable, "-m", "packer.cli", *args], start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    units = os.path.join(out, "units")
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.isdir(units) and os.listdir(units)) and p.poll() is None:
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)  # to the main process only, as kill PID / docker stop send it
    _, err = p.communicate(timeout=60)
    if p.returncode == 0:
        pytest.skip("build finished before SIGTERM arrived")
    assert p.returncode == 143, err
    assert "Traceback" not in err and "terminated" in err and "--resume" in err
    # Workers, the forkserver and the resource tracker are gone with it (none
    # holds the caller's stderr: communicate() above returned).
    for _ in range(100):
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("processes of the build outlived it")
    # ... and so is its folder of chunk files (packer/pipeline/spill.py), in /dev/shm or the temporary folder
    import tempfile

    for base in ("/dev/shm", tempfile.gettempdir()):
        left = [n for n in (os.listdir(base) if os.path.isdir(base) else []) if n.startswith(f"packer-spill-{p.pid}-")]
        assert left == [], (base, left)
    build(str(root), out, seq_len=256, unit_mb=0.1, workers=2, resume=True)
    assert run_cli("stats", out).exit_code == 0


def test_cli_in_process_leaves_sigterm_as_it_found_it(tmp_path, corpus):
    before = signal.getsignal(signal.SIGTERM)
    res = run_cli("build", corpus, str(tmp_path / "out"), *ARGS)
    assert res.exit_code == 0, res.output
    assert signal.getsignal(signal.SIGTERM) is before


# 7. Memory bounded by settings, not input: decompression bombs and over-long records.
def _peak_rss_mb(code: str) -> float:
    r = subprocess.run([sys.executable, "-c", code + "\nimport resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[-1]) / 1024


def test_decompression_bomb_is_bounded_and_counted(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    bomb = zstandard.ZstdCompressor(level=3).compress(b"\0" * (256 << 20))  # 256 MB of NUL in a few KB
    assert len(bomb) < 64 << 10
    (root / "bomb.jsonl.zst").write_bytes(bomb)
    (root / "ok.jsonl").write_bytes(jl({"text": "fine"}))
    small = tmp_path / "small"
    small.mkdir()
    (small / "ok.jsonl").write_bytes(jl({"text": "fine"}))
    code = ("from packer import build; r = build({!r}, {!r}, seq_len=64, workers=1, max_record_mb=4); "
            "print(json.dumps(r.manifest['totals']['skipped']))")
    base = _peak_rss_mb("import json\n" + code.format(str(small), str(tmp_path / "o1")))
    peak = _peak_rss_mb("import json\n" + code.format(str(root), str(tmp_path / "o2")))
    # Bounded by --max-record-mb (4 MB, a few copies) and the 32 MB zstd step: far below 256 MB.
    assert peak < base + 160, (base, peak)
    m = json.load(open(tmp_path / "o2" / "manifest.json"))
    assert m["totals"]["skipped"] == {"too_long": 1}
    assert "bomb.jsonl.zst:1" in m["totals"]["skipped_examples"]["too_long"][0]
    assert m["totals"]["documents"] == 1
    assert m["settings"]["max_record_bytes"] == 4 << 20


def test_over_long_line_and_text_file_are_skipped_and_counted(tmp_path):
    long = {"text": "x" * (3 << 20)}
    texts, m = run(tmp_path, {"a.jsonl": jl({"text": "one"}, long, {"text": "three"}),
                              "big.txt": b"y" * (2 << 20)}, max_record_mb=1)
    assert texts == [b"one", b"three"]
    assert skipped(m) == {"too_long": 2}
    ex = m["totals"]["skipped_examples"]["too_long"]
    assert any(e.split(" ")[0].endswith("a.jsonl:2") for e in ex) and any("big.txt" in e for e in ex)


def test_default_max_record_is_not_recorded(tmp_path):
    _, m = run(tmp_path, {"a.jsonl": jl({"text": "one"})})
    assert "max_record_bytes" not in m["settings"]  # a build without the option has the bytes it always had


# 8. Special files: only regular files are read; the rest is counted.
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_and_device_inputs_are_counted_not_read(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    os.mkfifo(root / "x.jsonl")
    os.symlink("/dev/zero", root / "zero.txt")
    (root / "ok.jsonl").write_bytes(jl({"text": "fine"}))
    out = str(tmp_path / "out")
    r = cli("build", str(root), out, "--seq-len", "64", "--workers", "1", timeout=60)
    assert r.returncode == 0, r.stderr
    t = json.load(open(os.path.join(out, "manifest.json")))["totals"]
    assert t["skipped"] == {"not_regular": 2} and t["documents"] == 1
    assert any("x.jsonl" in e for e in t["skipped_examples"]["not_regular"])


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


# 9. Tracebacks where one line belongs.
def test_file_symlink_loop_is_one_line(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    os.symlink("b.txt", root / "a.txt")
    os.symlink("a.txt", root / "b.txt")
    r = cli("build", str(root), str(tmp_path / "out"), timeout=60)
    assert r.returncode == 2
    one_line(r, "a.txt")


def test_file_name_not_utf8_is_one_line(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    try:
        open(os.path.join(os.fsencode(root), b"caf\xe9.txt"), "wb").write(b"text")
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    r = cli("build", str(root), str(tmp_path / "out"), timeout=60)
    assert r.returncode == 2
    one_line(r, "not valid UTF-8")


def test_parquet_cell_of_invalid_utf8_is_skipped_and_counted(tmp_path):
    col = pa.array([b"good", b"caf\xe9", b"also good"], pa.binary()).view(pa.string())
    p = tmp_path / "in" / "a.parquet"
    p.parent.mkdir()
    pq.write_table(pa.table({"text": col}), p)
    texts, m = run(tmp_path, {})
    assert texts == [b"good", b"also good"]
    assert skipped(m) == {"invalid_utf8": 1}
    assert m["totals"]["skipped_examples"]["invalid_utf8"][0].endswith("a.parquet: row 1")


@pytest.mark.parametrize("damage", ["seq_len a string", "shards a number", "a shard entry a list",
                                    "rows negative", "200k-deep nesting"])
def test_hostile_manifest_is_one_line(sample_build, copy_build, damage):
    from packer import PackedDataset

    out = copy_build(sample_build)
    path = os.path.join(out, "manifest.json")
    m = manifest(out)
    if damage == "seq_len a string":
        m["seq_len"] = "256"
    elif damage == "shards a number":
        m["shards"] = 5
    elif damage == "a shard entry a list":
        m["shards"][0] = [1, 2]
    elif damage == "rows negative":
        m["shards"][0]["rows"] = -1
    if damage == "200k-deep nesting":
        open(path, "w").write('{"format": "packer", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    else:
        save_manifest(out, m)
    for cmd in (["stats", out], ["show", out, "0"]):
        res = run_cli(*cmd)
        assert res.exit_code == 1, res.output
        assert len(res.stderr.strip().splitlines()) == 1 and "manifest.json" in res.stderr
    with pytest.raises(ShardError, match="manifest"):
        PackedDataset(out)


def test_doc_index_past_the_pieces_is_damage_not_a_32_gib_count(sample_build, copy_build):
    out = copy_build(sample_build)
    seq_len = manifest(out)["seq_len"]
    ids, lists = read_columns(shard_path(out), seq_len)
    lists["doc_index"][1][0] = 0xFFFFFFFF
    write_shard(out, 0, ids, lists, seq_len)
    res = run_cli("stats", out)
    assert res.exit_code == 1
    assert any("doc_index 4294967295" in ln for ln in problems(res)), res.stderr


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


def test_kill_during_build_json_write_then_resume_leaves_no_temp_file(tmp_path, corpus):
    out = str(tmp_path / "out")
    r = cli("build", corpus, out, *ARGS, env={"PACKER_FAULT": "rename"})  # the first atomic write: build.json
    assert r.returncode != 0
    assert any(n.startswith(".tmp-") for n in os.listdir(out))
    build(corpus, out, seq_len=128, unit_mb=0.02, workers=1, resume=True)
    assert not [n for n in os.listdir(out) if n.startswith(".")]
    assert run_cli("stats", out).exit_code == 0


def test_resume_of_a_finished_build_removes_a_stray_temp_file(tmp_path, corpus):
    out = str(tmp_path / "out")
    build(corpus, out, seq_len=128, workers=1)
    open(os.path.join(out, ".tmp-abc-manifest.json"), "wb").write(b"{half")
    res = build(corpus, out, seq_len=128, workers=1, resume=True)
    assert res.units_run == 0
    assert run_cli("stats", out).exit_code == 0


# 11. Bounds and exit codes.
def test_seq_len_that_cannot_be_allocated_is_refused_in_one_line(tmp_path, corpus):
    for n in ("100000000000", str(10**15)):
        r = cli("build", corpus, str(tmp_path / "out"), "--seq-len", n, timeout=60)
        assert r.returncode == 2
        one_line(r, "--seq-len", "too large")


def test_not_a_build_is_a_user_mistake(tmp_path):
    (tmp_path / "x").mkdir()
    for cmd in (["stats", str(tmp_path / "x")], ["show", str(tmp_path / "x"), "0"]):
        r = cli(*cmd, timeout=60)
        assert r.returncode == 2
        one_line(r, "not a packer build")


def test_stats_into_a_closed_pipe_exits_quietly(sample_build):
    rfd, wfd = os.pipe()
    os.close(rfd)  # the reader is gone before the first line, as `| head -0` would be
    try:
        r = subprocess.run([sys.executable, "-m", "packer.cli", "stats", sample_build], stdout=wfd,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(wfd)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Broken pipe" not in r.stderr


# 12. Data that should be read.
@pytest.mark.parametrize("kind", ["dictionary", "string_view", "large_string"])
def test_parquet_text_columns_of_other_string_types_are_read(tmp_path, kind):
    texts = ["alpha", "beta", "alpha"]
    if kind == "dictionary":
        col = pa.array(texts).dictionary_encode()
    elif kind == "string_view":
        if not hasattr(pa, "string_view"):
            pytest.skip("pyarrow without string_view")
        col = pa.array(texts, pa.string_view())
    else:
        col = pa.array(texts, pa.large_string())
    p = tmp_path / "in" / "a.parquet"
    p.parent.mkdir()
    pq.write_table(pa.table({"text": col}), p)
    got, m = run(tmp_path, {})
    assert got == [t.encode() for t in texts] and skipped(m) == {}


def test_parquet_nested_struct_field(tmp_path):
    meta = pa.array([{"body": "first", "n": 1}, None, {"body": None, "n": 3}, {"body": "last", "n": 4}])
    p = tmp_path / "in" / "a.parquet"
    p.parent.mkdir()
    pq.write_table(pa.table({"meta": meta, "id": [1, 2, 3, 4]}), p)
    got, m = run(tmp_path, {}, text_field="meta.body")
    assert got == [b"first", b"last"]
    assert skipped(m) == {"not_string": 2}  # a null struct, a null body
    # A field that no row has: every record missing_field, so no document: one line naming the columns.
    with pytest.raises(PackerError, match=r"all 4 records were skipped \(missing_field 4\).*the records have: meta, id"):
        run(tmp_path / "again", {"a.parquet": p.read_bytes()}, text_field="meta.nope")


def test_json_wide_integers_and_lone_surrogates_elsewhere_are_kept(tmp_path):
    lines = (b'{"text": "wide", "id": 123456789012345678901234567890123}',
             b'{"text": "neg", "id": -340282366920938463463374607431768211456}',
             b'{"text": "sur", "note": "\\ud800"}',
             b'{"meta": {"x": "\\udfff"}, "text": "nested sur"}')
    got, m = run(tmp_path, {"a.jsonl": b"\n".join(lines) + b"\n"})
    assert got == [b"wide", b"neg", b"sur", b"nested sur"] and skipped(m) == {}


# 13. Files honour the umask, as every peer's do.
@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, corpus, mask, mode):
    out = str(tmp_path / "out")
    old = os.umask(mask)  # the umask of the moment, as a shell's would be for a command
    try:
        build(corpus, out, seq_len=128, unit_mb=0.02, workers=1)
    finally:
        os.umask(old)
    files = [os.path.join(top, n) for top, _, names in os.walk(out) for n in names]
    assert len(files) >= 4
    assert {stat.S_IMODE(os.stat(f).st_mode) for f in files} == {mode}


# 6 (start-up). Ctrl-C while packer is still loading: one line, exit 130, no traceback.
@pytest.mark.parametrize("delay", [0.02, 0.1, 0.3])
def test_ctrl_c_while_packer_loads_is_one_line(tmp_path, delay):
    # The process interrupts itself ``delay`` s after entering the entry point
    # (Python's own start-up, site and all, is not packer's to handle).
    # The timer is a daemon: if the command wins the race, the interpreter does not wait for it at exit
    # (a SIGINT delivered inside Python's own shutdown is not packer's).
    code = ("import os, signal, sys, threading, packer_cli; "
            f"t = threading.Timer({delay}, os.kill, (os.getpid(), signal.SIGINT)); t.daemon = True; t.start(); "
            "packer_cli.main()")
    p = subprocess.run([sys.executable, "-c", code, "stats", str(tmp_path)], capture_output=True, text=True,
                       timeout=60, start_new_session=True)
    assert "Traceback" not in p.stderr, p.stderr
    # Interrupted while loading: 130; if loading won the race, the command ran (no build here: 2).
    assert p.returncode in (130, 2), (p.returncode, p.stderr)


# The command ends without the interpreter's teardown (0.1 s after every build, serial), yet with
# all its output written and its exit status kept.
def test_the_command_ends_at_once_with_its_output_and_status(tmp_path, corpus):
    code = ("import atexit, sys, packer.cli; atexit.register(lambda: sys.stderr.write('TEARDOWN\\n')); "
            "packer.cli.run()")

    def packer(*args, **kw):
        return subprocess.run([sys.executable, "-c", code, *args], text=True, timeout=120, start_new_session=True, **kw)

    out = tmp_path / "o"
    r = packer("build", corpus, str(out), *ARGS, capture_output=True)
    assert r.returncode == 0, r.stderr
    assert "TEARDOWN" not in r.stderr  # the process ended at once: no atexit hook ran
    with open(tmp_path / "stats.txt", "w") as f:  # a file, not a terminal: block-buffered, flushed before the end
        r = packer("stats", str(out), stdout=f, stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    written = (tmp_path / "stats.txt").read_text()
    assert "documents" in written and written == run_cli("stats", str(out)).output  # in process: no exit of ours
    r = packer("stats", str(tmp_path / "nothing"), capture_output=True)
    assert r.returncode == 2
    one_line(r, "no such build folder")
