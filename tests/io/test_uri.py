"""packer/io/uri.py: what is a URI, what may be shown of one, and that nothing secret is accepted in one."""

from __future__ import annotations

import pathlib

import pytest

from packer.errors import PackerError
from packer.io import uri as U


@pytest.mark.parametrize("path,want", [("s3://b/k", True), ("file:///tmp/x", True), ("gs://b", True),
                                       ("memory://x/y", True), ("/tmp/s3://x", False), ("relative/path", False),
                                       ("C:\\data", False), ("3s://x", False), ("", False)])
def test_is_uri_is_a_scheme_and_nothing_else(path, want):
    assert U.is_uri(path) is want


def test_a_path_object_is_never_a_uri(tmp_path):
    assert U.is_uri(pathlib.Path("s3://b/k")) is False and U.is_uri(tmp_path) is False


@pytest.mark.parametrize("uri", ["s3://AKIA:secret@bucket/key", "s3://user@bucket/key",
                                 "s3://bucket/key?X-Amz-Signature=abc", "s3://bucket/key#token"])
def test_a_uri_carrying_secrets_or_options_is_refused_without_showing_them(uri):
    with pytest.raises(PackerError, match="through the environment") as e:
        U.check_uri(uri)
    msg = str(e.value)
    assert msg.startswith("s3://bucket/key:")
    for secret in ("AKIA", "secret", "user", "Signature", "token"):
        assert secret not in msg
    assert U.redact(uri) == "s3://bucket/key"


def test_redact_keeps_host_port_and_path_and_leaves_a_local_path_alone():
    assert U.redact("http://u:p@host:9000/a/b?q=1") == "http://host:9000/a/b"
    assert U.redact("/local/path?not=a-query") == "/local/path?not=a-query"
    assert U.check_uri("s3://bucket/a/b.jsonl") == "s3://bucket/a/b.jsonl"


def test_join_and_first_line():
    assert U.join("s3://b/out/", "shards/0.arrow") == "s3://b/out/shards/0.arrow"
    assert U.join("s3://b/out", "") == "s3://b/out"
    assert U.first_line(OSError("first\nsecond")) == "first"
    assert U.first_line(ValueError("")) == "ValueError"


def test_filesystem_of_a_file_uri_is_the_local_path(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    fs, path = U.filesystem((tmp_path / "a.txt").as_uri())
    assert path == str(tmp_path / "a.txt")
    assert fs.get_file_info(path).size == 1


def test_filesystem_refuses_a_secret_before_opening_anything():
    with pytest.raises(PackerError, match="not in the URI"):
        U.filesystem("s3://key:secret@bucket/x")


def test_a_scheme_no_filesystem_knows_is_one_line():
    pytest.importorskip("fsspec")
    with pytest.raises(PackerError, match="nosuchscheme://"):
        U.filesystem("nosuchscheme://bucket/x")
