"""Real services on loopback for the object-storage and Ray tests: an
S3-compatible server (moto's server mode, a subprocess) and helpers to fill it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time

# Dummy credentials for the local server; the tests check they never reach a manifest.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "packer-test-key-id",
    "AWS_SECRET_ACCESS_KEY": "packer-test-secret-Zq81",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # no instance-metadata lookups
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# moto's server checks If-Match / If-None-Match and then writes, in one of its request threads each: two
# conditional writes of one key can both pass on a busy machine (seen: two builds taking one stale lock, at
# load 18), where S3 itself decides them atomically. The server the tests start makes each conditional
# object write or delete one step, as S3 does.
_ATOMIC_MOTO = """
import sys, threading
from moto.s3.responses import S3Response
one_at_a_time = threading.Lock()
def atomic(f):
    def call(self, *a, **k):
        with one_at_a_time:
            return f(self, *a, **k)
    return call
for name in ("put_object", "copy_object", "delete_object"):
    setattr(S3Response, name, atomic(getattr(S3Response, name)))
from moto.server import main
main(sys.argv[1:])
"""


class MotoServer:
    """``python -m moto.server`` on 127.0.0.1, started here, stopped by ``stop``."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-c", _ATOMIC_MOTO, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto server did not start")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def s3_environment(endpoint: str):
    """Point S3 clients of this process (and of processes it starts) at ``endpoint``."""
    from packer.io import uri as storage

    env = dict(S3_ENV, AWS_ENDPOINT_URL=endpoint)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    storage._fs_cache.clear()  # filesystems made for another endpoint
    try:
        yield env
    finally:
        storage._fs_cache.clear()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_SERVER: list[MotoServer] = []  # the run's one server, started by the first moto_s3, stopped at exit


@contextlib.contextmanager
def moto_s3():
    """An empty moto S3 server for the duration, with this process's S3 clients pointed at it; yields the env.
    One server process serves the whole run (its start is a second or two of a busy machine's time for each
    module that used its own): each use begins with its state reset (moto's /moto-api/reset: no bucket), as
    a server of its own would."""
    import atexit
    import urllib.request

    if not _SERVER or _SERVER[0].proc.poll() is not None:
        _SERVER[:] = [MotoServer()]
        atexit.register(_SERVER[0].stop)
    srv = _SERVER[0]
    urllib.request.urlopen(urllib.request.Request(srv.endpoint + "/moto-api/reset", method="POST"), timeout=30).read()
    with s3_environment(srv.endpoint) as env:
        yield env


def s3_client():
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])


def make_bucket(name: str) -> str:
    s3_client().create_bucket(Bucket=name)
    return name


def upload_tree(local: str, bucket: str, prefix: str, skip=()) -> None:
    """Copy the files under ``local`` to s3://bucket/prefix/, same relative names."""
    c = s3_client()
    for root, dirs, names in os.walk(local):
        for n in names:
            full = os.path.join(root, n)
            rel = os.path.relpath(full, local).replace(os.sep, "/")
            if not any(rel.endswith(s) for s in skip):
                c.upload_file(full, bucket, f"{prefix}/{rel}" if prefix else rel)


def objects(bucket: str, prefix: str) -> dict[str, bytes]:
    """{key relative to prefix: bytes} of every object under s3://bucket/prefix/."""
    c = s3_client()
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def folder_files(folder: str) -> dict[str, bytes]:
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            full = os.path.join(root, n)
            with open(full, "rb") as f:
                out[os.path.relpath(full, folder).replace(os.sep, "/")] = f.read()
    return out
