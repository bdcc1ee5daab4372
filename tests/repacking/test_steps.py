"""packer repack, end to end: shards byte-identical to a fresh build at the new length (longer, shorter, a
chain), holdout kept apart, several sources, --resume after a kill, --dry-run, the summary, and one line for
every user mistake (packer/repacking/steps.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from packer import PackerError, repack

from ..conftest import invoke, packer_cli, read_documents
from .conftest import shard_bytes


@pytest.mark.parametrize("src,dst", [(2048, 512), (512, 2048), (1024, 2048)])
def test_repack_equals_a_fresh_build_byte_for_byte(fresh, tmp_path, src, dst):
    out = str(tmp_path / "r")
    res = repack(fresh[src], out, seq_len=dst, workers=1)
    assert shard_bytes(out) == shard_bytes(fresh[dst])
    assert shard_bytes(out + "/holdout") == shard_bytes(fresh[dst] + "/holdout")  # holdout stays holdout
    m, f = res.manifest, json.load(open(os.path.join(fresh[dst], "manifest.json")))
    for key in ("documents", "tokens", "rows", "padding", "pieces", "documents_split", "skipped", "input_files"):
        assert m["totals"][key] == f["totals"][key], key
    assert [s[k] for s in m["shards"] for k in ("rows", "bytes", "xxh3_128")] == \
           [s[k] for s in f["shards"] for k in ("rows", "bytes", "xxh3_128")]
    assert m["holdout"] == f["holdout"]
    src_m = json.load(open(os.path.join(fresh[src], "manifest.json")))
    assert m["settings"]["repacked_from"][0]["seq_len"] == src
    assert m["settings"]["repacked_from"][0]["manifest_xxh3_128"] is not None
    assert m["tokenizer"] == src_m["tokenizer"]


def test_a_chain_comes_back_to_the_first_build(fresh, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    repack(fresh[2048], a, seq_len=1024, workers=2)
    repack(a, b, seq_len=2048, workers=2)
    assert shard_bytes(b) == shard_bytes(fresh[2048])
    assert shard_bytes(b + "/holdout") == shard_bytes(fresh[2048] + "/holdout")


def test_workers_do_not_change_a_byte(fresh, tmp_path):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    repack(fresh[512], one, seq_len=1024, workers=1)
    repack(fresh[512], two, seq_len=1024, workers=2)
    for f in ("manifest.json", "index.arrow", "holdout/manifest.json"):  # the whole build, not only the shards
        assert open(os.path.join(one, f), "rb").read() == open(os.path.join(two, f), "rb").read(), f
    assert shard_bytes(one) == shard_bytes(two)


def test_several_builds_become_one_in_the_order_given(fresh, tmp_path):
    out = str(tmp_path / "ab")
    m = repack([fresh[512], fresh[2048]], out, seq_len=1024, workers=1).manifest
    one = str(tmp_path / "one")
    repack(fresh[512], one, seq_len=1024)
    n = len(shard_bytes(one))
    assert shard_bytes(out) == shard_bytes(one) + shard_bytes(one)  # the same documents, unit by unit
    assert len(m["shards"]) == 2 * n and [s["unit"] for s in m["shards"]] == list(range(2 * n))
    docs, _ = read_documents(out)
    src, _ = read_documents(fresh[512])
    assert len(docs) == 2 * len(src) and all((a == b).all() for a, b in zip(docs, src + src))
    assert m["totals"]["skipped"] == {k: 2 * v for k, v in json.load(open(fresh[512] + "/manifest.json"))["totals"]["skipped"].items()}


def test_the_repack_is_a_build_every_reader_takes(fresh, tmp_path):
    out = str(tmp_path / "r")
    repack(fresh[2048], out, seq_len=512)
    res = invoke("stats", out)
    assert res.exit_code == 0, res.output
    assert invoke("show", out, "3").exit_code == 0
    torch = pytest.importorskip("torch")
    from packer import PackedDataset

    ds, ref = PackedDataset(out), PackedDataset(fresh[512])
    assert len(ds) == len(ref)
    for i in (0, len(ds) // 2, len(ds) - 1):
        assert all(torch.equal(ds[i][k], ref[i][k]) for k in ("input_ids", "labels", "position_ids"))
    assert len(PackedDataset(out + "/holdout")) == len(PackedDataset(fresh[512] + "/holdout"))


def test_resume_after_a_kill_is_byte_identical(fresh, tmp_path):
    out = str(tmp_path / "r")
    args = ["repack", fresh[2048], out, "--seq-len", "512", "--workers", "1", "-q"]
    killed = packer_cli(*args, env={"PACKER_FAULT": "write", "PACKER_FAULT_UNIT": "2"})
    assert killed.returncode != 0
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert os.path.exists(os.path.join(out, "units", "000001.json"))  # units before the kill are kept
    again = packer_cli(*args[:-1], "--resume")
    assert again.returncode == 0, again.stderr
    assert "2 already done" in again.stderr
    assert shard_bytes(out) == shard_bytes(fresh[512])
    assert shard_bytes(out + "/holdout") == shard_bytes(fresh[512] + "/holdout")


def test_dry_run_writes_nothing_and_the_summary_says_what_was_done(fresh, tmp_path):
    out = str(tmp_path / "r")
    res = invoke("repack", fresh[1024], out, "--seq-len", "2048", "--dry-run")
    assert res.exit_code == 0 and "would write 5 shards at seq_len 2,048" in res.output
    assert not os.path.exists(out)
    summary = tmp_path / "s.json"
    res = invoke("repack", fresh[1024], out, "--seq-len", "2048", "--summary-json", str(summary))
    assert res.exit_code == 0, res.output
    s = json.loads(summary.read_text())
    assert s["ok"] and s["seq_len"] == 2048 and s["units_run"] == 5
    assert s["tokens"] == json.load(open(fresh[2048] + "/manifest.json"))["totals"]["tokens"]


def test_mistakes_are_one_line_and_exit_2(fresh, tmp_path):
    cases = [
        (["repack", fresh[512], fresh[512], "--seq-len", "1024"], "also an input"),
        (["repack", str(tmp_path / "none"), str(tmp_path / "o"), "--seq-len", "1024"], "not a packer build"),
        (["repack", fresh[512], str(tmp_path / "o"), "--seq-len", "1"], "--seq-len must be"),
        (["repack", fresh[512], "--seq-len", "1024"], "give at least one finished BUILD"),
    ]
    for args, words in cases:
        res = invoke(*args)
        assert res.exit_code == 2 and words in res.output and res.output.count("\n") == 1, (args, res.output)
    taken = str(tmp_path / "taken")
    os.makedirs(taken)
    open(os.path.join(taken, "x"), "w").close()
    res = invoke("repack", fresh[512], taken, "--seq-len", "1024")
    assert res.exit_code == 2 and "not empty" in res.output


def test_builds_of_other_tokenizers_are_not_mixed(fresh, tmp_path):
    from packer import build

    from ..conftest import SAMPLE

    other = str(tmp_path / "noeos")
    build([SAMPLE + "/corpus.jsonl"], other, seq_len=512, eos=False, workers=1, holdout=0.1)
    with pytest.raises(PackerError, match="tokenizer and settings"):
        repack([fresh[512], other], str(tmp_path / "o"), seq_len=1024)
    with pytest.raises(PackerError, match="no holdout"):
        nohold = str(tmp_path / "nohold")
        build([SAMPLE + "/corpus.jsonl"], nohold, seq_len=512, workers=1)
        repack([fresh[512], nohold], str(tmp_path / "o2"), seq_len=1024)


def test_an_unfinished_or_damaged_source_is_named(fresh, tmp_path):
    broken = str(tmp_path / "broken")
    shutil.copytree(fresh[512], broken)
    os.remove(os.path.join(broken, "manifest.json"))
    with pytest.raises(PackerError, match="unfinished"):
        repack(broken, str(tmp_path / "o1"), seq_len=1024)
    damaged = str(tmp_path / "damaged")
    shutil.copytree(fresh[512], damaged)
    path = os.path.join(damaged, "shards", "000002.arrow")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    res = invoke("repack", damaged, str(tmp_path / "o2"), "--seq-len", "1024", "-q")
    assert res.exit_code == 1 and "000002.arrow" in res.output and "corrupt" in res.output
    assert not os.path.exists(os.path.join(tmp_path, "o2", "manifest.json"))


@pytest.mark.slow
def test_sigterm_stops_a_repack_as_ctrl_c_does_and_resume_finishes_it(fresh, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = str(tmp_path / "r")
    args = ["repack", fresh[2048], out, "--seq-len", "512", "--workers", "1", "-q"]
    p = subprocess.Popen([sys.executable, "-m", "packer.cli", *args], stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PACKER_FAULT": "slow"}, start_new_session=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "units", "000000.json")) and time.monotonic() < deadline:
        time.sleep(0.05)  # (polls the file the first unit writes: an event, not a guess at timing)
    p.send_signal(signal.SIGTERM)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "--resume" in err and "Traceback" not in err
    again = packer_cli(*args, "--resume")
    assert again.returncode == 0, again.stderr
    assert shard_bytes(out) == shard_bytes(fresh[512])


def test_an_out_or_dest_inside_the_build_is_refused_before_anything_is_written(fresh, tmp_path):
    import shutil as sh

    src = str(tmp_path / "b")
    sh.copytree(fresh[512], src)
    for args in (["repack", src, src + "/sub", "--seq-len", "1024"], ["export", src, src + "/nano", "--format", "nanogpt"]):
        res = invoke(*args)
        assert res.exit_code == 2 and "is inside the build" in res.output and res.output.count("\n") == 1, res.output
    assert sorted(os.listdir(src)) == sorted(os.listdir(fresh[512]))  # the build holds only what it held
    assert invoke("stats", src).exit_code == 0
