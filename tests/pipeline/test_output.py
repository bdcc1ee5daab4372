"""The build folder on --resume / --overwrite (packer/pipeline/output.py): a resume keeps only units it can
prove were made by these settings from these inputs (issue 33.2; docs/reliability.md)."""

from __future__ import annotations

import json
import os

import pytest

from packer import build
from packer.errors import PackerError
from tests._services import folder_files
from tests.conftest import write_jsonl
from tests._cli import ARGS, cli, one_line
from tests.conftest import invoke as run_cli

OPTS = dict(unit_mb=0.02, workers=1, quiet=True)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "c.jsonl"
    write_jsonl(path, [f"doc {i} " + "word " * (i % 70 + 1) for i in range(3000)])
    return str(path)


def test_old_units_without_build_json_are_not_kept_by_a_resume(tmp_path, corpus):
    """A kill during --overwrite (or build.json removed) leaves another build's units: --resume with new
    settings must rebuild them, not keep shards of the old seq_len under a manifest of the new one."""
    out, ref = str(tmp_path / "out"), str(tmp_path / "ref")
    build(corpus, out, seq_len=256, **OPTS)
    for name in ("manifest.json", "build.json"):
        os.remove(os.path.join(out, name))
    r = build(corpus, out, seq_len=128, resume=True, **OPTS)
    assert r.units_skipped == 0
    build(corpus, ref, seq_len=128, **OPTS)
    assert folder_files(out) == folder_files(ref)


def test_overwrite_removes_build_json_before_any_unit(tmp_path, corpus, monkeypatch):
    """Killed part way through deleting the old build, OUT never holds old units under a build.json."""
    from packer.io import storage_for

    out = str(tmp_path / "out")
    build(corpus, out, seq_len=256, **OPTS)
    order = []
    cls = type(storage_for(out))
    real = cls.clear

    def clear(self, tops, first):
        order.extend(sorted(tops, key=lambda t: t != first))
        if "units" in tops and not os.path.exists(os.path.join(out, "build.json")):
            raise KeyboardInterrupt  # the kill: build.json is already gone
        return real(self, tops, first)

    monkeypatch.setattr(cls, "clear", clear)
    with pytest.raises(KeyboardInterrupt):
        build(corpus, out, seq_len=128, overwrite=True, **OPTS)
    assert order[:2] == ["manifest.json", "build.json"]
    assert os.path.isdir(os.path.join(out, "units"))  # old units are left, but no settings claim them
    monkeypatch.undo()
    r = build(corpus, out, seq_len=128, resume=True, **OPTS)
    assert r.units_skipped == 0 and r.manifest["seq_len"] == 128


def test_a_record_of_another_input_range_is_rebuilt(tmp_path, corpus):
    """A unit record whose sources are not the unit's slices (another build's) is not trusted."""
    out = str(tmp_path / "out")
    first = build(corpus, out, seq_len=128, **OPTS)
    n = first.units_run
    assert n > 2
    os.remove(os.path.join(out, "manifest.json"))
    rec_path = os.path.join(out, "units", "000001.json")
    rec = json.load(open(rec_path))
    rec["sources"][0]["start"] += 1  # as if cut from another range of the input
    json.dump(rec, open(rec_path, "w"))
    r = build(corpus, out, seq_len=128, resume=True, **OPTS)
    assert r.units_run == 1 and r.units_skipped == n - 1
    ref = str(tmp_path / "ref")
    build(corpus, ref, seq_len=128, **OPTS)
    assert folder_files(out) == folder_files(ref)


def test_resume_with_other_settings_is_refused(tmp_path, corpus):
    out = str(tmp_path / "out")
    build(corpus, out, seq_len=128, **OPTS)
    os.remove(os.path.join(out, "manifest.json"))
    with pytest.raises(PackerError, match="other settings"):
        build(corpus, out, seq_len=256, resume=True, **OPTS)


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



# Issue 41.8: a same-size edit outside the input stamp's three blocks, its mtime put back, between a kill and
# --resume, mixed the two versions (exit 0). Each unit record keeps the hash of the bytes it read.

def _big(path):
    """A jsonl file of about 2 MiB (over the stamp's WHOLE_BYTES: only three blocks of it are stamped)."""
    write_jsonl(path, [f"doc {i} " + "word " * (i % 50 + 1) for i in range(16000)])
    assert os.path.getsize(path) > 2 << 20
    return str(path)


def _edit_at(path, fraction):
    """Change one letter at ``fraction`` of the file (same size), then put its modification time back."""
    st = os.stat(path)
    data = bytearray(open(path, "rb").read())
    at = data.index(b"word", int(len(data) * fraction))
    data[at:at + 4] = b"WORD"
    open(path, "wb").write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_an_edit_outside_the_stamped_blocks_is_seen_by_resume(tmp_path):
    src = _big(tmp_path / "c.jsonl")
    args = ["--seq-len", "128", "--unit-mb", "0.25", "--workers", "1", "-q"]
    out = str(tmp_path / "o")
    r = cli("build", src, out, *args, env={"PACKER_FAULT": "write", "PACKER_FAULT_UNIT": "3"})
    assert r.returncode != 0 and os.path.exists(os.path.join(out, "units", "000000.json"))
    _edit_at(src, 0.05)  # in unit 0, finished
    _edit_at(src, 0.75)  # in a unit not built yet
    r = cli("build", src, out, *args, "--resume")
    assert r.returncode == 2, r.stderr
    line = one_line(r, "cannot resume", src, "changed since the build was interrupted", "unit 0")
    assert "Traceback" not in line


def test_an_edit_only_where_no_unit_finished_resumes_to_the_edited_build(tmp_path):
    """What a finished unit read is unchanged: the resume reads the rest as it is now, and the build is the
    one a fresh build of the edited file gives (nothing mixed)."""
    src = _big(tmp_path / "c.jsonl")
    args = ["--seq-len", "128", "--unit-mb", "0.25", "--workers", "1", "-q"]
    out = str(tmp_path / "o")
    r = cli("build", src, out, *args, env={"PACKER_FAULT": "write", "PACKER_FAULT_UNIT": "3"})
    assert r.returncode != 0
    _edit_at(src, 0.75)
    r = cli("build", src, out, *args, "--resume")
    assert r.returncode == 0, r.stderr
    clean = str(tmp_path / "clean")
    assert cli("build", src, clean, *args).returncode == 0
    assert folder_files(out) == folder_files(clean)


# Issue 53.6: a resume refused because an input changed names the file and how; a finished build whose input
# changed at the same size says so, and that its shards hold the old content.

def _killed(tmp_path, files: dict) -> tuple[str, str]:
    root = tmp_path / "in"
    root.mkdir()
    for name, texts in files.items():
        write_jsonl(root / name, texts)
    out = str(tmp_path / "o")
    r = cli("build", str(root), out, *ARGS, env={"PACKER_FAULT": "write", "PACKER_FAULT_UNIT": "1"})
    assert r.returncode != 0 and not os.path.exists(os.path.join(out, "manifest.json"))
    return str(root), out


def _same_size_edit(path):
    data = bytearray(open(path, "rb").read())
    at = data.index(b"word")
    data[at:at + 4] = b"WORD"
    open(path, "wb").write(data)


def test_a_resume_refused_for_changed_inputs_names_the_file_and_how(tmp_path):
    texts = [f"doc {i} " + "word " * (i % 70 + 1) for i in range(400)]
    root, out = _killed(tmp_path, {"a.jsonl": texts, "b.jsonl": texts})
    b = os.path.join(root, "b.jsonl")
    size = os.path.getsize(b)
    _same_size_edit(b)
    r = cli("build", root, out, *ARGS, "--resume")
    assert r.returncode == 2
    one_line(r, "cannot resume", f"{b}: its content changed at the same size")
    with open(b, "a") as fh:
        fh.write('{"text": "one more"}\n')
    r = cli("build", root, out, *ARGS, "--resume")
    assert r.returncode == 2
    one_line(r, "input files changed", f"{b}: its size was {size:,} bytes, now {os.path.getsize(b):,}")


def test_a_finished_build_whose_input_changed_says_so_on_resume(tmp_path, corpus):
    out = str(tmp_path / "out")
    build(corpus, out, seq_len=128, **OPTS)
    size = os.path.getsize(corpus)
    _same_size_edit(corpus)
    res = build(corpus, out, seq_len=128, resume=True, **OPTS)
    assert res.units_run == 0 and "build was already complete: nothing to do" in res.notes
    assert len(res.warnings) == 1 and f"{corpus} changed since" in res.warnings[0]
    assert "its shards hold the old content" in res.warnings[0]
    with open(corpus, "a") as fh:
        fh.write('{"text": "one more"}\n')
    with pytest.raises(PackerError, match=f"input files changed: {corpus}: its size was {size:,} bytes, now"):
        build(corpus, out, seq_len=128, resume=True, **OPTS)
    res = build(corpus, str(tmp_path / "o2"), seq_len=128, **OPTS)  # and a fresh build: nothing said
    assert res.warnings == []


def test_a_temp_file_a_killed_write_left_mid_build_is_gone_when_it_finishes(tmp_path, corpus, monkeypatch):
    """A Ray worker SIGKILLed mid-write leaves its ``.tmp-*`` shard and Ray runs the unit again: the build
    finishes with every unit done, so no write of its own is under way, and the leftover is removed before the
    manifest (seen once in CI: test_ray's killed-worker test found it beside the shards). Here a forked worker
    leaves one as it writes its first unit; the folder is then the clean build's, file for file."""
    from packer import faults

    clean = str(tmp_path / "clean")
    build(corpus, clean, seq_len=128, unit_mb=0.02, workers=2)
    out = str(tmp_path / "out")
    real = faults.point

    def leaves_a_temp_file(name):
        if name == "write" and faults._UNIT.get() == 0:
            open(os.path.join(out, "shards", ".tmp-killed-000000.arrow"), "wb").write(b"ARROW1 half a shard")
        return real(name)

    monkeypatch.setattr(faults, "point", leaves_a_temp_file)
    build(corpus, out, seq_len=128, unit_mb=0.02, workers=2)
    assert folder_files(out) == folder_files(clean)
