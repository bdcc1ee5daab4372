"""The bucket repack the bucket tests read: sample_data (byte tokenizer, seq_len 256) at --buckets 256:8192."""

from __future__ import annotations

import pytest

from packer import repack


@pytest.fixture(scope="module")
def bucketed(sample_build, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("buckets") / "outb")
    repack(sample_build, out, buckets=(256, 8192), workers=1, quiet=True)
    return out
