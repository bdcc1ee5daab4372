"""Object-store requests of packer on s3:// builds, counted by S3 operation at the server (issue 31.5).

moto's S3 runs in this process behind a WSGI layer that names each request's operation (pyarrow's C++
client and boto3 both reach it over HTTP: every request of every process counts). For each N: a jsonl
of N units of 4 KB is built into s3:// (``packer build --unit-mb 0.004 --seq-len 64``: N shards), then
each step is a child process: PackedDataset open, R random rows (their first uses; open subtracted),
``packer stats``, ``--resume`` of the finished build. ``--base REF``: open and rows again with packer
from a ``git worktree`` of REF (the before of a change).

Run:  python bench/store_requests.py --sizes 10 100 1000 --rows 100 [--base REF]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
from urllib.parse import parse_qs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
READ = r"""
import sys, numpy as np
from packer import PackedDataset
ds = PackedDataset(sys.argv[1], cache_dir=sys.argv[2])
idx = np.random.default_rng(0).choice(len(ds), size=min(int(sys.argv[3]), len(ds)), replace=False).tolist()
for i in idx:
    ds[i]
print(ds.num_shards, len({ds._shards.locate(i)[0] for i in idx}))
"""


def operation(method: str, path: str, query: str, headers) -> str:
    """The S3 operation of a path-style request."""
    key, q = "/" in path.lstrip("/"), parse_qs(query, keep_blank_values=True)
    if method in ("GET", "HEAD") and not key:
        return ("ListObjectsV2" if q.get("list-type") == ["2"] else "ListObjects") if method == "GET" else "HeadBucket"
    if method == "PUT" and key:
        return "UploadPart" if "partNumber" in q else "CopyObject" if "x-amz-copy-source" in headers else "PutObject"
    if method == "POST":
        return "DeleteObjects" if "delete" in q else "CreateMultipartUpload" if "uploads" in q else "CompleteMultipartUpload"
    return {"GET": "GetObject", "HEAD": "HeadObject", "DELETE": "DeleteObject", "PUT": "CreateBucket"}.get(method, method)


class Server:
    """moto's S3 on 127.0.0.1 in a thread; ``counts``: requests by operation, ``log``: (operation, path)."""

    def __init__(self):
        from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        app, self.counts, self.log, lock = DomainDispatcherApplication(create_backend_app), collections.Counter(), [], threading.Lock()

        def counted(environ, start_response):
            headers = {k[5:].lower().replace("_", "-") for k in environ if k.startswith("HTTP_")}
            op = operation(environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("QUERY_STRING", ""), headers)
            with lock:
                self.counts[op] += 1
                self.log.append((op, environ["PATH_INFO"]))
            return app(environ, start_response)

        self.srv = make_server("127.0.0.1", 0, counted, threaded=True, request_handler=MotoRequestHandler)
        self.endpoint = f"http://127.0.0.1:{self.srv.server_port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def run(self, argv: list[str], tree: str = REPO) -> tuple[collections.Counter, str]:
        """The requests of a child process (``python ARGV``, packer from ``tree``), and its stdout."""
        before = collections.Counter(self.counts)
        env = {**os.environ, **ENV, "AWS_ENDPOINT_URL": self.endpoint, "PYTHONPATH": tree}
        r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=tree)
        if r.returncode:
            sys.exit(f"{argv[:3]} failed:\n{r.stderr[-3000:]}")
        return collections.Counter(self.counts) - before, r.stdout


def steps(srv: Server, n: int, rows: int, tmp: str, trees: list) -> tuple[int, list]:
    """(shards built, [(step, requests)]) for a build of ``n`` units; ``trees``: [(packer checkout, tag)]."""
    words, out, src = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split(), f"s3://b{n}/out", f"{tmp}/{n}.jsonl"
    with open(src, "w") as f:
        size, k = 0, 0
        while size < (n - 0.5) * 4194:  # unit-mb 0.004; ASCII, so characters are bytes
            size, k = size + f.write(json.dumps({"text": f"{k} " + " ".join(words[(k * 7 + j) % 10] for j in range(35))}) + "\n"), k + 1
    srv.run(["-c", f"import boto3; boto3.client('s3').create_bucket(Bucket='b{n}')"])
    build = ["-m", "packer.cli", "build", src, out, "--seq-len", "64", "--unit-mb", "0.004", "--workers", "2", "-q"]
    got = [("build", srv.run(build)[0])]
    for tree, tag in trees:
        opened, _ = srv.run(["-c", READ, out, tempfile.mkdtemp(dir=tmp), "0"], tree)
        read, used = srv.run(["-c", READ, out, tempfile.mkdtemp(dir=tmp), str(rows)], tree)
        shards, used = map(int, used.split())
        got += [("open" + tag, opened), (f"{rows} rows: {used} first uses{tag}", read - opened)]
    got.append(("stats", srv.run(["-m", "packer.cli", "stats", out, "-q"])[0]))
    return shards, got + [("resume", srv.run(build + ["--resume"])[0])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--base", default=None, help="a git ref: open and rows also with packer as of it")
    a = ap.parse_args()
    srv, tmp = Server(), tempfile.mkdtemp(prefix="store_requests-")
    base, trees = os.path.join(tmp, "base"), [(REPO, "")]
    if a.base:
        subprocess.run(["git", "-C", REPO, "worktree", "add", "-q", "--detach", base, a.base], check=True)
        trees.append((base, f" ({a.base})"))
    try:
        table = [(n, step, c) for n, got in (steps(srv, k, a.rows, tmp, trees) for k in a.sizes) for step, c in got]
    finally:
        if a.base:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", base], check=True)
    ops = sorted({op for _, _, c in table for op in c}, key=lambda op: -sum(c[op] for _, _, c in table))
    print("| shards | step | requests | per shard | " + " | ".join(ops) + " |\n" + "|---" * (4 + len(ops)) + "|")
    for n, step, c in table:
        total = sum(c.values())
        print(f"| {n:,} | {step} | {total:,} | {total / n:.2f} | " + " | ".join(f"{c[op]:,}" for op in ops) + " |")


if __name__ == "__main__":
    main()
