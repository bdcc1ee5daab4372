"""What S3 offers that ``pyarrow.fs`` does not expose: ETags and conditional writes, through boto3.

boto3 is optional (it comes with ``packer[storage-test]``, and with most AWS
setups): without it, or for another scheme, ``client`` is None and callers
fall back (stamps without ETags; a best-effort lock, packer/io/object_lock.py).
Endpoints and credentials come from the environment, as for pyarrow
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, an instance role, ...).

Conditional writes (S3 since 2024, and moto 5): ``PutObject`` with
``If-None-Match: *`` creates an object only where there is none;
``If-Match: <etag>`` replaces (or ``DeleteObject`` removes) it only while it
is the version that ETag names. Either fails with 412 when another writer got
there first: ``Conflict`` here.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import PackerError
from .uri import first_line, redact

_clients: dict = {}
_clients_lock = threading.Lock()


class Conflict(Exception):
    """A conditional request found another version (412), or none (404 on If-Match)."""


class Unsupported(PackerError):
    """The store does not take conditional writes (501 Not Implemented): the caller falls back."""


@dataclass(frozen=True)
class Got:
    body: bytes
    etag: str
    modified: float  # the object's Last-Modified, seconds since the epoch (the store's clock)
    now: float  # the response's Date: the store's clock now


def client(uri: str):
    """A boto3 S3 client for ``uri`` (one per process), or None (not s3://, or no boto3)."""
    if urlsplit(uri).scheme.lower() != "s3":
        return None
    key = (os.getpid(), os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_REGION"))
    with _clients_lock:
        hit = _clients.get(key)
        if hit is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                return None
            hit = boto3.session.Session().client("s3", config=Config(retries={"max_attempts": 5, "mode": "standard"}))
            _clients[key] = hit
    return hit


def split(uri: str) -> tuple[str, str]:
    u = urlsplit(uri)
    return u.netloc, u.path.lstrip("/")


def etags(uri: str) -> dict[str, str] | None:
    """{URI: ETag} of every object below the prefix ``uri`` (one listing, 1,000 keys a page);
    None without boto3 or on an error (stamps then go without)."""
    c = client(uri)
    if c is None:
        return None
    bucket, prefix = split(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    out = {}
    try:
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", ()):
                out[f"s3://{bucket}/{o['Key']}"] = o.get("ETag", "")
    except Exception:  # noqa: BLE001 - botocore's errors are many; the stamp is a help, never a reason to fail
        return None
    return out


def head_etag(uri: str) -> str:
    """The ETag of one object ("" where it cannot be had)."""
    c = client(uri)
    if c is None:
        return ""
    bucket, key = split(uri)
    try:
        return c.head_object(Bucket=bucket, Key=key).get("ETag", "")
    except Exception:  # noqa: BLE001
        return ""


def _fail(what: str, uri: str, e: BaseException) -> Exception:
    """``Conflict`` for another version or none (412, 409, no such key); else one line (``PackerError``)."""
    resp = getattr(e, "response", None) or {}
    code = resp.get("Error", {}).get("Code", "")
    status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if status in (409, 412) or code in ("NoSuchKey", "404"):
        return Conflict(code)
    if status == 501 or code == "NotImplemented":
        return Unsupported(f"cannot {what} {redact(uri)}: the store does not take conditional writes")
    return PackerError(f"cannot {what} {redact(uri)}: {first_line(e)}")


def get(uri: str) -> Got | None:
    """The object, its ETag and times; None if there is none."""
    bucket, key = split(uri)
    try:
        r = client(uri).get_object(Bucket=bucket, Key=key)
        body = r["Body"].read()
    except Exception as e:  # noqa: BLE001
        err = _fail("read", uri, e)
        if isinstance(err, Conflict):
            return None
        raise err from None
    return Got(body, r.get("ETag", ""), r["LastModified"].timestamp(), date_of(r))


def create(uri: str, body: bytes) -> str:
    """Write ``body`` only if there is no object at ``uri``; its ETag. ``Conflict`` if there is one."""
    bucket, key = split(uri)
    try:
        return client(uri).put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")["ETag"]
    except Exception as e:  # noqa: BLE001
        raise _fail("write", uri, e) from None


def replace(uri: str, body: bytes, etag: str) -> str:
    """Write ``body`` only while the object is the version ``etag`` names; the new ETag."""
    bucket, key = split(uri)
    try:
        return client(uri).put_object(Bucket=bucket, Key=key, Body=body, IfMatch=etag)["ETag"]
    except Exception as e:  # noqa: BLE001
        raise _fail("write", uri, e) from None


def delete(uri: str, etag: str) -> None:
    """Remove the object only while it is the version ``etag`` names."""
    bucket, key = split(uri)
    try:
        client(uri).delete_object(Bucket=bucket, Key=key, IfMatch=etag)
    except Exception as e:  # noqa: BLE001
        raise _fail("delete", uri, e) from None


def date_of(r) -> float:
    """A response's Date header (the store's clock, whole seconds), since the epoch; this host's clock without one."""
    import email.utils
    import time

    d = r.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        return email.utils.parsedate_to_datetime(d).timestamp()
    except (TypeError, ValueError):
        return time.time()
