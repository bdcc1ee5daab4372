"""packer/io/fence.py against moto's S3 server: every object a build writes into its OUT is fenced by
the lease it holds; a writer that lost the lease writes nothing more (issue 41.6: a stalled builder
wrote its shard 0 and unit 0 into the build that had taken its expired lease over)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from packer.io import fence
from packer.io import object_lock as OL
from packer.io import storage_for
from packer.io.lock import LOCK_NAME
from tests._services import objects, s3_client
from tests.conftest import packer_cli
from tests.io.test_object_storage import bucket, s3  # noqa: F401 - fixtures


def test_a_write_after_the_lease_was_taken_over_is_not_made(bucket, monkeypatch):
    monkeypatch.setattr(OL, "LEASE_S", 3600.0)
    out = storage_for(f"s3://{bucket}/o")
    lk = OL.ObjectLock(out).acquire()
    try:
        out.put("units/000000.json", b"ours")
        assert objects(bucket, "o")["units/000000.json"] == b"ours"
        body = json.loads(objects(bucket, "o")[LOCK_NAME])
        s3_client().put_object(Bucket=bucket, Key=f"o/{LOCK_NAME}",  # what a build taking it over writes
                               Body=json.dumps({**body, "token": "the-next-build"}).encode())
        with pytest.raises(fence.LeaseLost, match="another build took it over.*wrote nothing more"):
            out.put("units/000000.json", b"stale")
        with pytest.raises(fence.LeaseLost):
            out.put("shards/000001.arrow", b"stale")
        got = objects(bucket, "o")
        assert got["units/000000.json"] == b"ours" and "shards/000001.arrow" not in got
        assert not [k for k in got if ".tmp-" in k], "the temp copy is gone too"
    finally:
        lk.release(finished=True)
    assert fence.ENV not in os.environ, "a released lease fences nothing"


def _objects(bucket: str, prefix: str) -> dict[str, bytes]:
    """``objects``, while a build writes: a key listed and gone before it is read (a temp copy) left out."""
    c, out = s3_client(), {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            try:
                out[o["Key"][len(prefix) + 1:]] = c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
            except c.exceptions.NoSuchKey:
                pass
    return out


def _corpus(bucket: str) -> str:
    c = s3_client()
    for i in range(3):
        body = "".join(f'{{"text": "doc {i}-{k} {"words " * (k % 23)}"}}\n' for k in range(400)).encode()
        c.put_object(Bucket=bucket, Key=f"in/{i}.jsonl", Body=body)
    return f"s3://{bucket}/in"


def test_a_stalled_builder_writes_nothing_into_the_build_that_took_its_lease(bucket):
    """The scenario of issue 41.6 with a 4 s lease: SIGSTOP a build (every chunk 2 s slow: its workers are
    mid-unit), let its lease lapse, an --overwrite build with another --seq-len takes OUT and finishes;
    SIGCONT the first: it stops, and OUT is exactly what the second build left."""
    corpus, out = _corpus(bucket), f"s3://{bucket}/o"
    opts = ["--unit-mb", "0.01", "--workers", "2", "-q"]
    env = {"PACKER_LEASE_S": "4"}
    a = subprocess.Popen([sys.executable, "-m", "packer.cli", "build", corpus, out, "--seq-len", "128", *opts],
                         env={**os.environ, **env, "PACKER_FAULT": "slow"}, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(k.startswith("units/") for k in _objects(bucket, "o")):  # a unit done, the next ones under way
            assert a.poll() is None and time.monotonic() < deadline, a.stderr.read() if a.poll() is not None else ""
            time.sleep(0.2)
        os.killpg(a.pid, signal.SIGSTOP)
        time.sleep(5.5)  # past the 4 s lease
        b = packer_cli("build", corpus, out, "--seq-len", "64", "--overwrite", *opts, env=env)
        assert b.returncode == 0, b.stderr
        done = objects(bucket, "o")
        assert LOCK_NAME not in done and json.loads(done["manifest.json"])["seq_len"] == 64
    finally:
        os.killpg(a.pid, signal.SIGCONT)
    _, err = a.communicate(timeout=60)
    assert a.returncode != 0, err
    assert "lost the lock" in err and "Traceback" not in err, err
    assert objects(bucket, "o") == done, "the stalled build wrote into the build that took OUT over"
    r = packer_cli("stats", out)
    assert r.returncode == 0, r.stdout + r.stderr
