"""packer/io/s3.py: ETags and conditional writes through boto3, against moto's in-process S3."""

from __future__ import annotations

import pytest

from packer.errors import PackerError
from packer.io import s3


@pytest.fixture
def store(monkeypatch):
    pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setattr(s3, "_clients", {})  # a client made inside the mock
    with moto.mock_aws():
        s3.client("s3://bkt").create_bucket(Bucket="bkt")
        yield "s3://bkt"


def test_only_s3_uris_get_a_client():
    assert s3.client("gs://b/x") is None and s3.client("/local/x") is None
    assert s3.etags("memory://b/x") is None and s3.head_etag("file:///x") == ""
    assert s3.split("s3://bucket/a/b.jsonl") == ("bucket", "a/b.jsonl")


def test_create_is_refused_where_an_object_is(store):
    etag = s3.create(f"{store}/lock", b"one")
    assert etag and s3.head_etag(f"{store}/lock") == etag
    with pytest.raises(s3.Conflict):
        s3.create(f"{store}/lock", b"two")
    assert s3.get(f"{store}/lock").body == b"one"


def test_replace_and_delete_hold_only_for_the_version_named(store):
    first = s3.create(f"{store}/lock", b"one")
    second = s3.replace(f"{store}/lock", b"two", first)
    assert second != first
    with pytest.raises(s3.Conflict):
        s3.replace(f"{store}/lock", b"three", first)  # another writer replaced it since
    with pytest.raises(s3.Conflict):
        s3.delete(f"{store}/lock", first)
    got = s3.get(f"{store}/lock")
    assert got.body == b"two" and got.etag == second and got.modified > 0 and got.now > 0
    s3.delete(f"{store}/lock", second)
    assert s3.get(f"{store}/lock") is None


def test_etags_list_every_object_below_the_prefix_only(store):
    c = s3.client(store)
    for key in ("in/a.jsonl", "in/sub/b.jsonl", "input-other/c.jsonl"):
        c.put_object(Bucket="bkt", Key=key, Body=key.encode())
    got = s3.etags(f"{store}/in")
    assert set(got) == {"s3://bkt/in/a.jsonl", "s3://bkt/in/sub/b.jsonl"}
    assert got["s3://bkt/in/a.jsonl"] == s3.head_etag("s3://bkt/in/a.jsonl") != ""
    assert s3.head_etag("s3://bkt/in/none") == ""
    assert s3.etags("s3://no-such-bucket/x") is None  # an error: stamps go without, never a failure


class _Err(Exception):
    def __init__(self, status, code):
        super().__init__(f"{code} ({status})")
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


@pytest.mark.parametrize("status,code,kind", [(412, "PreconditionFailed", s3.Conflict), (409, "Conflict", s3.Conflict),
                                              (404, "NoSuchKey", s3.Conflict), (501, "NotImplemented", s3.Unsupported),
                                              (403, "AccessDenied", PackerError)])
def test_store_errors_are_a_conflict_a_fallback_or_one_line(status, code, kind):
    err = s3._fail("write", "s3://bkt/k", _Err(status, code))
    assert type(err) is kind
    if kind is not s3.Conflict:
        assert str(err).startswith("cannot write s3://bkt/k")
