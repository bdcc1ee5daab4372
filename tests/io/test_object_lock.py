"""The build lock on an object-store OUT (packer/io/object_lock.py), against moto's S3 server:
one build at a time in a prefix (conditional writes: exactly one of many wins), the holder named
as on a local folder, a lease that a dead or vanished build cannot hold forever, and the input
stamps a killed build leaves for ``--resume`` (an input object rewritten in between is refused)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from packer import build
from packer.errors import PackerError
from packer.io import object_lock as OL
from packer.io import storage_for
from packer.io.lock import LOCK_NAME

from tests._services import objects, s3_client
from tests.conftest import packer_cli
from tests.io.test_object_storage import bucket, s3  # noqa: F401 - fixtures

OPTS = ["--seq-len", "128", "--unit-mb", "0.02", "--workers", "1", "-q"]


def _put_lock(bucket: str, prefix: str, **info) -> None:
    body = {"pid": 1, "host": "elsewhere", "started": "2026-01-01T00:00:00+00:00", "token": "t", "lease_s": 3600,
            "inputs": None, **info}
    s3_client().put_object(Bucket=bucket, Key=f"{prefix}/{LOCK_NAME}", Body=json.dumps(body).encode())


def _lock_info(bucket: str, prefix: str):
    return json.loads(objects(bucket, prefix)[LOCK_NAME]) if LOCK_NAME in objects(bucket, prefix) else None


@pytest.fixture
def corpus(bucket):
    c = s3_client()
    for i in range(4):
        body = "".join(f'{{"text": "doc {i}-{k} {"words " * (k % 17)}"}}\n' for k in range(300)).encode()
        c.put_object(Bucket=bucket, Key=f"in/{i}.jsonl", Body=body)
    return f"s3://{bucket}/in"


def test_a_second_build_into_a_locked_prefix_is_refused_naming_the_holder(bucket, corpus):
    out = f"s3://{bucket}/out"
    build(corpus, out, seq_len=128, unit_mb=0.02, workers=1)
    assert LOCK_NAME not in objects(bucket, "out"), "a finished build leaves no lock"
    before = objects(bucket, "out")
    held = storage_for(out).lock()
    held.record("x")
    try:
        with pytest.raises(PackerError, match=rf"{out} is in use by another packer build \(pid {os.getpid()} on "
                                              rf"{socket.gethostname()}, started .*lease"):
            build(corpus, out, seq_len=64, unit_mb=0.02, workers=1, overwrite=True)
        after = objects(bucket, "out")
        assert {k: v for k, v in after.items() if k != LOCK_NAME} == before, "the refused build touched nothing"
    finally:
        held.release(finished=False)
    assert json.loads(objects(bucket, "out")[LOCK_NAME])["released"] is True
    build(corpus, out, seq_len=64, unit_mb=0.02, workers=1, overwrite=True)  # a released lock is free at once
    assert LOCK_NAME not in objects(bucket, "out")


def test_packer_index_names_the_build_that_holds_the_prefix(bucket):
    """Issue 41 item 10: it said "not a packer build (no manifest.json)" (the running build has written
    none yet); it names the holder, as on a local folder, and a released or expired lease holds nothing."""
    from tests.conftest import invoke

    out = f"s3://{bucket}/busy"
    assert storage_for(out).held_by() is None
    held = storage_for(out).lock()
    try:
        r = invoke("index", out)
        assert r.exit_code == 2, r.output
        assert f"a build is running there (pid {os.getpid()} on {socket.gethostname()}" in r.stderr
        assert storage_for(out).held_by()["token"] == held.info["token"]
    finally:
        held.release(finished=False)
    assert storage_for(out).held_by() is None  # released: --resume may take it, index may read it
    _put_lock(bucket, "old", lease_s=1)
    deadline = time.monotonic() + 10
    while storage_for(f"s3://{bucket}/old").held_by() is not None:  # the store's clock counts whole seconds
        assert time.monotonic() < deadline, "a lease not renewed within lease_s still holds"
        time.sleep(0.25)
    _put_lock(bucket, "held")
    assert storage_for(f"s3://{bucket}/held").held_by()["host"] == "elsewhere"


@pytest.mark.parametrize("stale", [False, True])
def test_of_many_builds_taking_the_lock_at_once_exactly_one_wins(bucket, stale):
    if stale:  # all of them take over the same released lock
        _put_lock(bucket, "race", released=True)
    got, refused, go = [], [], threading.Barrier(8)

    def take():
        go.wait()
        try:
            got.append(OL.ObjectLock(storage_for(f"s3://{bucket}/race")).acquire())
        except PackerError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(got) == 1 and len(refused) == 7, refused
        assert all("in use by another packer build" in r for r in refused)
        assert _lock_info(bucket, "race")["token"] == got[0].info["token"]
    finally:
        for lk in got:
            lk.release(finished=True)


def test_a_lock_not_renewed_within_its_lease_is_taken_over_with_its_stamps(bucket):
    _put_lock(bucket, "p", lease_s=1, inputs="stamp-of-the-dead-build")
    with pytest.raises(PackerError, match="in use by another packer build .pid 1 on elsewhere"):
        OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()
    deadline = time.monotonic() + 10
    while True:  # the store's clock counts whole seconds: the lease ends within about 2 s
        try:
            lk = OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()
            break
        except PackerError:
            assert time.monotonic() < deadline, "the lease never ended"
            time.sleep(0.25)
    try:
        assert lk.previous["inputs"] == "stamp-of-the-dead-build" and lk.previous["host"] == "elsewhere"
    finally:
        lk.release(finished=False)  # refused to start, say: the dead build's stamps stay for a resume
    assert _lock_info(bucket, "p")["inputs"] == "stamp-of-the-dead-build"


def test_a_holder_gone_from_this_host_is_taken_over_at_once(bucket):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _put_lock(bucket, "p", pid=int(gone.stdout), host=socket.gethostname())
    lk = OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()
    lk.release(finished=True)
    assert _lock_info(bucket, "p") is None


def test_a_running_build_renews_its_lease(bucket, monkeypatch):
    monkeypatch.setattr(OL, "LEASE_S", 3.0)
    lk = OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()
    try:
        time.sleep(4)  # past the lease: still held, because renewed
        with pytest.raises(PackerError, match="in use by another packer build"):
            OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()
    finally:
        lk.release(finished=True)


def test_a_holder_whose_lock_was_taken_over_knows_it_lost_it(bucket, monkeypatch):
    monkeypatch.setattr(OL, "LEASE_S", 2.0)
    box = []
    t = threading.Thread(target=lambda: box.append(OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()))
    t.start()  # not the main thread: losing it must not interrupt pytest
    t.join()
    lk = box[0]
    _put_lock(bucket, "p", token="another-build")  # what a build taking over a lapsed lease writes
    deadline = time.monotonic() + 10
    while lk.lost is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lk.lost and "another build took it over" in lk.lost
    with pytest.raises(PackerError, match="lost the lock on"):
        lk.check()
    with pytest.raises(PackerError, match="lost the lock on"):
        lk.record("x")
    lk.release(finished=True)
    assert _lock_info(bucket, "p")["token"] == "another-build", "the new holder's lock is left alone"


def _kill_mid_build(corpus: str, out: str) -> None:
    r = packer_cli("build", corpus, out, *OPTS, env={"PACKER_FAULT": "write", "PACKER_FAULT_UNIT": "1"})
    assert r.returncode != 0, r.stderr


def test_kill_then_resume_on_the_store_is_byte_identical_and_sees_a_rewritten_input(bucket, corpus):
    ref = f"s3://{bucket}/ref"
    build(corpus, ref, seq_len=128, unit_mb=0.02, workers=1)
    out = f"s3://{bucket}/out"
    _kill_mid_build(corpus, out)
    info = _lock_info(bucket, "out")
    assert info and info["inputs"] and "manifest.json" not in objects(bucket, "out"), "the killed build's stamps"
    r = build(corpus, out, seq_len=128, unit_mb=0.02, workers=1, resume=True)  # its pid is gone: taken at once
    assert r.units_skipped >= 1 and r.units_run >= 1
    got, want = objects(bucket, "out"), objects(bucket, "ref")
    assert LOCK_NAME not in got
    assert sorted(got) == sorted(want) and all(got[k] == want[k] for k in want)

    again = f"s3://{bucket}/again"
    _kill_mid_build(corpus, again)
    stamps = _lock_info(bucket, "again")["inputs"]
    c, key = s3_client(), "in/3.jsonl"
    old = c.head_object(Bucket=bucket, Key=key)
    data = c.get_object(Bucket=bucket, Key=key)["Body"].read()
    c.put_object(Bucket=bucket, Key=key, Body=data.replace(b"doc 3-", b"DOC 3-"))  # same size, other bytes
    assert c.head_object(Bucket=bucket, Key=key)["ETag"] != old["ETag"]
    with pytest.raises(PackerError, match="input files changed"):
        build(corpus, again, seq_len=128, unit_mb=0.02, workers=1, resume=True)
    assert _lock_info(bucket, "again")["inputs"] == stamps, "a refused resume keeps the killed build's stamps"


def test_a_forked_worker_never_renews_or_releases_the_lock(bucket):
    lk = OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()
    try:
        pid = os.fork()
        if pid == 0:  # the child: what a local-engine worker forked beside the renewal thread sees
            lk.release(finished=True)  # must do nothing here
            os._exit(0 if lk.etag is None and lk._stop.is_set() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _lock_info(bucket, "p")["token"] == lk.info["token"], "the child's release left the lock alone"
        lk.record("after-fork")  # the parent still holds it (its mutex was let go after the fork)
        assert _lock_info(bucket, "p")["inputs"] == "after-fork"
    finally:
        lk.release(finished=True)


def test_without_conditional_writes_a_running_build_is_still_named(bucket, monkeypatch):
    """A store that answers 501 to If-None-Match (an older MinIO or Ceph): the same protocol over plain writes."""
    from packer.io import s3 as S3

    def refuse(*a, **k):
        raise S3.Unsupported("cannot write: the store does not take conditional writes")

    monkeypatch.setattr(S3, "create", refuse)
    a = OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()
    try:
        assert isinstance(a.store, OL._Unconditional) and _lock_info(bucket, "p")["token"] == a.info["token"]
        with pytest.raises(PackerError, match=rf"in use by another packer build \(pid {os.getpid()} on "):
            OL.ObjectLock(storage_for(f"s3://{bucket}/p")).acquire()
        a.record("s")
        assert _lock_info(bucket, "p")["inputs"] == "s"
    finally:
        a.release(finished=True)
    assert _lock_info(bucket, "p") is None
