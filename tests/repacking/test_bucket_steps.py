"""packer repack --buckets, top to bottom (packer/repacking/bucket_steps.py): each bucket a build, resume,
overwrite, the command line."""

from __future__ import annotations

import json
import os

import pytest

from packer import repack
from packer.errors import PackerError

from ..conftest import invoke
from ._bucketed import bucketed  # noqa: F401 (a fixture)


def test_each_bucket_is_a_build_that_stats_passes(bucketed):
    info = json.load(open(os.path.join(bucketed, "buckets.json")))
    assert [b["length"] for b in info["buckets"]] == [256, 512, 1024, 2048, 4096, 8192]
    for b in info["buckets"]:
        r = invoke("stats", os.path.join(bucketed, b["path"]), "--json")
        assert r.exit_code == 0, r.output
        m = json.load(open(os.path.join(bucketed, b["path"], "manifest.json")))
        assert m["seq_len"] == b["length"] and m["totals"]["padding"] == 0 and m["totals"]["rows"] == b["rows"]
        assert m["totals"]["pieces"] == m["totals"]["rows"]


def test_rerun_resume_and_overwrite(sample_build, bucketed, tmp_path):
    with pytest.raises(PackerError, match="not empty"):
        repack(sample_build, bucketed, buckets="256:8192", quiet=True)
    r = repack(sample_build, bucketed, buckets="256:8192", resume=True, quiet=True)
    assert r.units_run == 0
    out = str(tmp_path / "again")
    repack(sample_build, out, buckets="256:8192", workers=2, quiet=True)  # workers change no byte
    for name in ("len-00512/shards/000002.arrow", "len-08192/manifest.json", "buckets.json"):
        a, b = open(os.path.join(out, name), "rb").read(), open(os.path.join(bucketed, name), "rb").read()
        assert a == b or name == "buckets.json" and json.loads(a)["buckets"] == json.loads(b)["buckets"]
    os.remove(os.path.join(out, "buckets.json"))
    os.remove(os.path.join(out, "units", "000001.json"))
    r = repack(sample_build, out, buckets="256:8192", resume=True, quiet=True)
    assert r.units_run == 1
    with pytest.raises(PackerError, match="--seq-len"):
        repack(sample_build, out, buckets="256:8192", seq_len=512)


def test_cli_buckets(sample_build, tmp_path):
    r = invoke("repack", sample_build, str(tmp_path / "b"), "--buckets", "512:1024", "--summary-json", "-", "-q")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["ok"] and [b["length"] for b in s["buckets"]] == [512, 1024] and s["dropped"]["tail_under_min"]["tokens"] > 0


def test_holdout_is_bucketed_too(tmp_path):
    from packer import BuildConfig, build

    from ..conftest import SAMPLE

    src, out = str(tmp_path / "src"), str(tmp_path / "b")
    build(BuildConfig.of(inputs=(os.path.join(SAMPLE, "corpus.jsonl"),), out=src, seq_len=256, workers=1,
                         unit_bytes=1 << 19, holdout=0.1, quiet=True))
    info = repack(src, out, buckets="256:4096", workers=1, quiet=True).manifest
    held = json.load(open(os.path.join(src, "holdout", "manifest.json")))["totals"]
    h = info["holdout"]
    assert h["tokens"] == held["tokens"] and h["kept_tokens"] + sum(d["tokens"] for d in h["dropped"].values()) == h["tokens"]
    for b in h["buckets"]:
        m = json.load(open(os.path.join(out, "holdout", b["path"], "manifest.json")))
        assert m["settings"]["split"] == "holdout" and m["totals"]["rows"] == b["rows"]
        assert invoke("stats", os.path.join(out, "holdout", b["path"])).exit_code == 0
