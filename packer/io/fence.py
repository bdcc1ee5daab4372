"""Every object a build writes into an S3 OUT is fenced by the lease it holds (packer/io/object_lock.py).

A build stopped (SIGSTOP, a VM paused, a network cut) for longer than its
lease loses the lock to the next build; when it runs again, a worker in the
middle of a unit must not write that unit's shard and record into the build
that took OUT over. S3 has no write conditional on *another* object, so each
``put`` into a fenced prefix is made as:

1. the bytes go to a temp key beside the target (``.tmp-<random>-<name>``: harmless
   wherever it lands; ``--resume`` and ``--overwrite`` delete such keys);
2. the lease is read (one GET of ``.packer.lock``): it must hold this build's
   token, not be released, and have at least a quarter of its lease left by the
   store's clock, else nothing is written (``LeaseLost``, one line);
3. one server-side ``CopyObject`` puts the bytes at the target; the temp key is deleted.

No other build can take the lease over before ``Last-Modified + lease_s`` of
the lock read in step 2 (object_lock's rule of staleness, on the store's
clock). A copy whose response is dated before then is fenced. Otherwise the
lock is read once more: still ours, no takeover happened before the copy;
not ours, the copy may have landed in another build (the writer stalled for
longer than the lease had left *between* steps 2 and 3, two short requests):
it is not hidden, ``LeaseLost`` names the key, and the other build's
``packer stats`` sees the shard differ from its manifest. That is the
window left: a writer cannot be fenced by the store itself without a
conditional write across two objects, which S3 does not have.

Which lease fences which prefix is told to the build's other processes by
the environment (``PACKER_FENCE``: JSON {OUT: [lock URI, token, lease_s]}), set
when the lock is taken: forked and spawned workers and a local Ray started by
the build inherit it. Without boto3 (no conditional writes either) or on
another scheme, writes are plain.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid

from ..errors import PackerError
from . import s3
from .uri import redact

ENV = "PACKER_FENCE"
MARGIN = 0.25  # of the lease: a writer with less left by the store's clock writes nothing (renewal runs every 1/4)
COPY_MAX = 5 << 30  # bytes: S3's limit for one CopyObject
_env_lock = threading.Lock()


class LeaseLost(PackerError):
    """This build no longer holds the lease on its OUT: the write was not made (or, said so, may have been)."""


def hold(root: str, lock_uri: str, token: str, lease_s: float) -> None:
    """Fence writes below ``root`` with the lease at ``lock_uri`` held under ``token`` (this process and its children)."""
    with _env_lock:
        held = _held()
        held[root.rstrip("/")] = [lock_uri, token, lease_s]
        os.environ[ENV] = json.dumps(held)


def drop(root: str) -> None:
    with _env_lock:
        held = _held()
        held.pop(root.rstrip("/"), None)
        if held:
            os.environ[ENV] = json.dumps(held)
        else:
            os.environ.pop(ENV, None)


def _held() -> dict:
    try:
        held = json.loads(os.environ.get(ENV) or "{}")
    except ValueError:
        return {}
    return held if isinstance(held, dict) else {}


def fence_for(uri: str):
    """(lock URI, token, lease_s) of the lease that fences a write to ``uri`` (an object URI), or None."""
    best = None
    for root, f in _held().items():
        if uri.startswith(root + "/") and (best is None or len(root) > len(best[0])):
            best = (root, f)
    if best is None or s3.client(uri) is None:
        return None
    lock_uri, token, lease_s = best[1]
    return lock_uri, token, float(lease_s)


def fenced_put(uri: str, data, fence, upload) -> None:
    """Write ``data`` at ``uri`` as the module docstring says; ``upload(uri, data)`` writes one object whole."""
    lock_uri, token, lease_s = fence
    head, _, name = uri.rpartition("/")
    tmp = f"{head}/.tmp-{uuid.uuid4().hex[:12]}-{name}"
    upload(tmp, data)
    try:
        got = _check(lock_uri, token, lease_s, uri, margin=MARGIN * lease_s)
        dated = _copy(tmp, uri, memoryview(data).nbytes)
        if dated is None or dated + 1.0 > got.modified + lease_s:  # (Date and Last-Modified: whole seconds)
            _check(lock_uri, token, lease_s, uri, margin=None, landed=True)
    finally:
        with contextlib.suppress(Exception):
            bucket, key = s3.split(tmp)
            s3.client(tmp).delete_object(Bucket=bucket, Key=key)


def _check(lock_uri: str, token: str, lease_s: float, uri: str, margin, landed: bool = False):
    """The lock read now, if it is still this build's with ``margin`` seconds of lease left (None: any);
    else ``LeaseLost`` (``landed``: the write to ``uri`` was already made)."""
    cur = s3.get(lock_uri)
    info = None
    if cur is not None:
        with contextlib.suppress(ValueError):
            info = json.loads(cur.body)
    ours = isinstance(info, dict) and info.get("token") == token and not info.get("released")
    left = (cur.modified + lease_s - cur.now) if cur is not None else 0.0
    if ours and (margin is None or left >= margin):
        return cur
    root = lock_uri.rpartition("/")[0]
    if landed:
        raise LeaseLost(f"lost the lock on {redact(root)} while writing {redact(uri)}, which may now be in the "
                        "build that took it over: check that build with packer stats")
    why = "its lease runs out" if ours else "another build took it over, or it was released"
    raise LeaseLost(f"lost the lock on {redact(root)} ({why}): this build stopped and wrote nothing more there "
                    f"(not {redact(uri).rpartition('/')[2]}); rerun with --resume once no other build uses it")


def _copy(src: str, dst: str, nbytes: int) -> float | None:
    """Server-side copy of ``src`` to ``dst``; the response's Date (the store's clock), or None when not known."""
    c = s3.client(dst)
    sb, sk = s3.split(src)
    db, dk = s3.split(dst)
    try:
        if nbytes <= COPY_MAX:
            return s3.date_of(c.copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk}))
        c.copy({"Bucket": sb, "Key": sk}, db, dk)  # over 5 GiB: a multipart copy, its time unknown
        return None
    except Exception as e:  # noqa: BLE001 - botocore's errors are many
        raise PackerError(f"cannot write {redact(dst)}: {str(e).splitlines()[0] if str(e) else type(e).__name__}; "
                          "nothing partial was kept: fix the cause and rerun with --resume") from None
