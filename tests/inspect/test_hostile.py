"""Hostile manifests, FIFOs for shards, and output streams that cannot be written (issue 33.15, 33.16):
one line and exit 1 or 2 from ``packer stats`` and ``packer show``, never a traceback or a hang."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from packer import PackedDataset
from packer import shards as S
from packer.errors import ShardError
from packer.io import storage_for

from tests.conftest import REPO, invoke as run_cli
from tests.inspect.test_stats import manifest, save_manifest, shard_path

SHAPES = {
    "seq_len 10**12": lambda m: m.update(seq_len=10**12),
    "seq_len 2**64": lambda m: m.update(seq_len=2**64),
    "seq_len 2**31 - 1": lambda m: m.update(seq_len=2**31 - 1),  # allowed, and must not cost 16 GiB of histogram
    "shards[0].unit 'x'": lambda m: m["shards"][0].update(unit="x"),
    "totals.rows 'x'": lambda m: m["totals"].update(rows="x"),
    "shards[0].tokens 'x'": lambda m: m["shards"][0].update(tokens="x"),
    "shards[0] without rows": lambda m: m["shards"][0].pop("rows"),
    "vocab_size 2**70": lambda m: m.update(vocab_size=2**70),
}


def one_line(res, code=(1, 2)):
    assert res.exit_code in code, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines and "Traceback" not in res.output
    return lines


@pytest.mark.parametrize("shape", list(SHAPES))
def test_hostile_manifest_shapes_are_one_line(sample_build, copy_build, shape):
    out = copy_build(sample_build)
    m = manifest(out)
    SHAPES[shape](m)
    save_manifest(out, m)
    for cmd in (["stats", out], ["stats", out, "--no-verify"], ["stats", out, "--json"], ["show", out, "0"]):
        res = run_cli(*cmd)
        lines = one_line(res)
        if shape != "seq_len 2**31 - 1":  # refused as a malformed manifest, naming it
            assert len(lines) == 1 and "manifest.json" in lines[0] and "malformed" in lines[0], (cmd, lines)
        else:  # a readable manifest whose shards disagree with it: problems, one line each
            assert all(ln.startswith("packer:") for ln in lines), lines
    if shape != "seq_len 2**31 - 1":
        with pytest.raises(ShardError, match="manifest.json: malformed manifest"):
            PackedDataset(out)


def test_a_fifo_shard_is_named_not_waited_on(sample_build, copy_build):
    """In a child with a time limit: a hang fails the test instead of stopping the suite."""
    out = copy_build(sample_build)
    p = shard_path(out, 0)
    os.unlink(p)
    os.mkfifo(p)
    for cmd in (["show", out, "0"], ["stats", out], ["stats", out, "--no-verify"]):
        r = _packer(cmd, timeout=60)
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr and "000000.arrow" in r.stderr
    assert "not a regular file" in _packer(["show", out, "0"]).stderr


def test_an_index_that_no_longer_matches_is_ignored_by_every_reader(sample_build, copy_build):
    """An index is a cache of the manifest: once the manifest changes, it is not read (and not a problem)."""
    out = copy_build(sample_build)
    store = storage_for(out)
    S.write_manifest(store, S.read_manifest(store))
    assert run_cli("stats", out).exit_code == 0  # index.arrow is a file of the build
    m = manifest(out)
    m["shards"][0]["path"] = "../elsewhere.arrow"  # an edit after the index was written
    save_manifest(out, m)
    assert not S.open_index(store).from_index
    for cmd in (["stats", out], ["show", out, "0"]):
        res = run_cli(*cmd)
        assert res.exit_code == 1 and "outside the build folder" in res.stderr, cmd
    with pytest.raises(ShardError, match="outside the build folder"):
        PackedDataset(out)


# --------------------------------------------------------------------------
# Output streams that cannot be written (the installed entry point, in a child).


def _packer(args, shell_redirect: str = "", timeout: int = 120):
    code = "import sys; sys.argv[0] = 'packer'; from packer._entry import main; main()"
    cmd = " ".join([f"exec {sys.executable} -c \"{code}\""] + [f"'{a}'" for a in args] + [shell_redirect])
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("redirect", [">&-", "> /dev/full"])
@pytest.mark.parametrize("cmd", [["stats", "{out}"], ["stats", "{out}", "--json"], ["show", "{out}", "0"], ["--help"]])
def test_closed_or_full_stdout_is_one_line_and_exit_2(sample_build, redirect, cmd):
    if redirect.endswith("full") and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    r = _packer([a.format(out=sample_build) for a in cmd], redirect)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packer: error:") and "standard output" in lines[0], r.stderr


def test_closed_stderr_is_a_non_zero_exit(sample_build):
    assert _packer(["stats", sample_build], "2>&-").returncode == 2
    assert _packer(["stats", sample_build], "> /dev/null").returncode == 0  # a stream that takes it all is fine


# --------------------------------------------------------------------------
# FIFOs where index.arrow or a shard belongs (issue 41.4): refused or ignored, never waited on.


def _fifo(path: str) -> None:
    os.unlink(path)
    os.mkfifo(path)


def test_a_fifo_for_the_index_is_ignored_with_one_warning_not_waited_on(sample_build, copy_build):
    """PackedDataset and packer show read the manifest instead (one warning naming index.arrow); both
    hung on 0a283c5. In children with a time limit: a hang fails the test instead of stopping the suite."""
    out = copy_build(sample_build)
    rows = manifest(out)["totals"]["rows"]
    _fifo(os.path.join(out, S.INDEX))
    code = f"from packer import PackedDataset; ds = PackedDataset({out!r}); print(len(ds), int(ds[len(ds) - 1]['input_ids'][0]))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 0 and r.stdout.split()[0] == str(rows), r.stderr
    assert "index.arrow: damaged shard index (unreadable: [Errno 22] not a regular file" in r.stderr
    r = _packer(["show", out, "0"], timeout=60)
    assert r.returncode == 0 and "row 0 of" in r.stdout and "damaged shard index" in r.stderr, r.stderr
    r = _packer(["stats", out, "--no-verify"], timeout=60)
    assert r.returncode == 1 and "index.arrow: damaged shard index" in r.stdout + r.stderr and "Traceback" not in r.stderr


def test_a_fifo_for_a_shard_does_not_hang_packer_index(sample_build, copy_build):
    """``packer index`` reads each shard's footer for its layout: a FIFO is not opened blocking (it hung
    on 0a283c5); the shard gets no layout, and readers name it when they reach it."""
    out = copy_build(sample_build)
    _fifo(shard_path(out, 0))
    r = _packer(["index", out], timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    with pytest.raises(ShardError, match=r"000000\.arrow: not a regular file"):
        PackedDataset(out)[0]
