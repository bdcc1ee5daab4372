"""Builds of sample_data at several lengths (the byte tokenizer, 1 MB units: five shards and a holdout),
made once per test run and only read: what a repack must reproduce byte for byte."""

from __future__ import annotations

import os

import pytest

from ..conftest import SAMPLE

LENGTHS = (512, 1024, 2048)


@pytest.fixture(scope="session")
def fresh(tmp_path_factory):
    """{seq_len: build folder} of sample_data with a 10% holdout, one per length in LENGTHS."""
    from packer import build

    root = tmp_path_factory.mktemp("fresh")
    out = {}
    for n in LENGTHS:
        out[n] = str(root / f"b{n}")
        build([SAMPLE], out[n], seq_len=n, workers=1, unit_mb=1, holdout=0.1)
    return out


def shard_bytes(out: str) -> list[bytes]:
    """Every shard file's bytes, in manifest order, of the build at ``out`` (and none other)."""
    import json

    m = json.load(open(os.path.join(out, "manifest.json")))
    assert sorted(os.listdir(os.path.join(out, "shards"))) == sorted(os.path.basename(s["path"]) for s in m["shards"])
    return [open(os.path.join(out, s["path"]), "rb").read() for s in m["shards"]]
