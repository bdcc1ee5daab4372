"""--engine ray on several Ray nodes, one of them lost mid-build, with the input and OUT on S3.

A local multi-node cluster (``ray.cluster_utils.Cluster``: a head that runs no tasks, and 3 nodes
of 1 CPU, each a raylet of its own) and moto's S3 server on 127.0.0.1. While the build runs, the
node whose worker is running a unit is removed (its raylet and workers killed, as a lost machine);
Ray runs that unit again on a node that is left, and the build finishes with every object
byte-identical to a local-engine build of the same inputs, its lock gone. Only the public API is
used (``packer.build(..., engine="ray", ray_address=...)``)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from packer import build

from tests._services import folder_files, make_bucket, objects, s3_client

pytestmark = pytest.mark.slow  # about 30-40 s on 2 shared cores: 4 raylets start; CI runs it

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'packer[ray]')")
OPTS = dict(seq_len=1024, unit_mb=0.5)
UNITS = 9


@pytest.fixture(scope="module")
def s3_env():
    """moto's S3 server, started before the cluster so that every raylet (and so every task) inherits its endpoint."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'packer[storage-test]')")
    pytest.importorskip("boto3")
    from tests._services import moto_s3

    with moto_s3() as env:
        yield env


@pytest.fixture(scope="module")
def cluster(s3_env):
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
        try:
            for _ in range(3):
                c.add_node(num_cpus=1)
            c.wait_for_nodes()
            yield c
        finally:
            c.shutdown()


def _raylet_pid(node) -> int:
    from ray._private import ray_constants

    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def _unit_workers() -> dict[int, int]:
    """{parent pid: pid} of the processes running a unit now (process title ray::packer_unit)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if not f.read().startswith(b"ray::packer_unit"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                out[int(f.read().rsplit(")", 1)[1].split()[1])] = int(pid)
        except (OSError, IndexError, ValueError):
            continue
    return out


def _lose_a_busy_node(cluster, stop: threading.Event, lost: list) -> None:
    """Remove the first worker node seen running a unit (its raylet and workers are killed)."""
    nodes = {_raylet_pid(n): n for n in cluster.worker_nodes}
    while not stop.is_set():
        busy = [raylet for raylet in _unit_workers() if raylet in nodes]
        if busy:
            cluster.remove_node(nodes[busy[0]], allow_graceful=False)
            lost.append(busy[0])
            return
        time.sleep(0.01)


def _corpus(bucket: str, files: int = 3) -> str:
    """``files`` jsonl objects of 1.5 MB under s3://bucket/in (bench/ray_nodes.py makes more)."""
    c = s3_client()
    for i in range(files):  # 3 files: 9 units of 0.5 MB, each a few tenths of a second of work
        body = "".join(f'{{"text": "{i}-{k} {"lorem ipsum dolor sit amet " * (40 + k % 90)}"}}\n'
                       for k in range(800)).encode()
        c.put_object(Bucket=bucket, Key=f"in/{i}.jsonl", Body=body[: 1_500_000])
    return f"s3://{bucket}/in"


def test_a_node_lost_mid_build_on_s3_still_gives_the_local_bytes(cluster, tmp_path):
    bucket = make_bucket("ray-nodes")
    corpus = _corpus(bucket)
    local = str(tmp_path / "local")
    want = build(corpus, local, workers=2, **OPTS)
    assert len(want.manifest["shards"]) == UNITS
    stop, lost = threading.Event(), []
    killer = threading.Thread(target=_lose_a_busy_node, args=(cluster, stop, lost))
    killer.start()
    try:
        r = build(corpus, f"s3://{bucket}/out", engine="ray", ray_address=cluster.address, workers=3, **OPTS)
    finally:
        stop.set()
        killer.join()
    assert lost, "no node was caught running a unit"
    assert r.units_run == UNITS and any("engine ray:" in n for n in r.notes)
    got = objects(bucket, "out")
    assert got == folder_files(local), "every object as the local build wrote it, and no lock left"
    assert len(cluster.worker_nodes) == 2
