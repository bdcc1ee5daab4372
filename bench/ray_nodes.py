"""--engine ray on a local multi-node cluster, with and without losing a node mid-build (input and OUT on S3).

    python bench/ray_nodes.py [--nodes 3] [--files 6] [--rounds 2]

Starts moto's S3 server on 127.0.0.1 and a ``ray.cluster_utils.Cluster``
(a head without CPUs, ``--nodes`` nodes of 1 CPU each, each its own raylet),
puts ``--files`` jsonl objects of 1.5 MB (3 units of 0.5 MB each) under
s3://ray-nodes/in, then per round, in turn: a local-engine build (s3:// in,
local out, 2 workers), a Ray build (s3:// in and out, ``--nodes`` units in
flight), and a Ray build during which the node first seen running a unit
is removed (raylet and workers killed; a node is added back after it, so
each round starts from the same cluster). Every build must give the local
build's bytes. Prints best-of-rounds seconds and the ratios as one JSON line.
All of it on one machine: the nodes share its cores, and moto is a Python
server far slower than S3, so the figures bound the overheads, not a real
cluster's speed (docs/distributed.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import emit_json  # noqa: E402

from packer import build  # noqa: E402
from tests._services import folder_files, make_bucket, moto_s3, objects  # noqa: E402
from tests.pipeline.test_ray_cluster import OPTS, _corpus, _lose_a_busy_node  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    tmp = tempfile.mkdtemp(prefix="packer-ray-nodes-")
    best = {"local": 1e9, "ray": 1e9, "ray_node_lost": 1e9}
    with moto_s3():
        bucket = make_bucket("ray-nodes")
        corpus = _corpus(bucket, a.files)
        start, cluster = timed(lambda: Cluster(initialize_head=True,
                                               head_node_args=dict(num_cpus=0, include_dashboard=False)))
        try:
            t = time.perf_counter()
            for _ in range(a.nodes):
                cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            start += time.perf_counter() - t
            units = 0
            for r in range(a.rounds):
                local = os.path.join(tmp, f"local-{r}")
                s, res = timed(lambda: build(corpus, local, workers=2, **OPTS))
                best["local"], units, want = min(best["local"], s), res.units_run, folder_files(local)
                for kind in ("ray", "ray_node_lost"):
                    stop, lost = threading.Event(), []
                    killer = threading.Thread(target=_lose_a_busy_node, args=(cluster, stop, lost))
                    if kind == "ray_node_lost":
                        killer.start()
                    s, _ = timed(lambda: build(corpus, f"s3://{bucket}/{kind}-{r}", engine="ray",
                                               ray_address=cluster.address, workers=a.nodes, **OPTS))
                    stop.set()
                    if kind == "ray_node_lost":
                        killer.join()
                        assert lost, "no node was caught running a unit"
                        cluster.add_node(num_cpus=1)
                        cluster.wait_for_nodes()
                    assert objects(bucket, f"{kind}-{r}") == want, f"{kind} differs from the local build"
                    best[kind] = min(best[kind], s)
        finally:
            cluster.shutdown()
            if ray.is_initialized():
                ray.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)
    emit_json({"bench": "ray_nodes", "nodes": a.nodes, "units": units, "input_mb": round(a.files * 1.5, 1),
               "cores": len(os.sched_getaffinity(0)), "cluster_start_s": round(start, 2),
               **{f"{k}_s": round(v, 2) for k, v in best.items()},
               "ray/local": round(best["ray"] / best["local"], 3),
               "node_lost/ray": round(best["ray_node_lost"] / best["ray"], 3), "identical": True}, a.json)


if __name__ == "__main__":
    main()
