"""A build whose rows hold several documents each (so attention could mix them)."""

from __future__ import annotations

import random

import pytest

from ..conftest import write_jsonl


@pytest.fixture(scope="session")
def short_docs_build(tmp_path_factory) -> str:
    """600 documents of 10-90 bytes (seeded), byte tokenizer, seq_len 128: 2-10 documents a row."""
    from packer import BuildConfig, build

    rng = random.Random(0)
    words = "the of and packed rows documents attention mask token shard train model".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 14)))[:90] for _ in range(600)]
    d = tmp_path_factory.mktemp("short")
    src = write_jsonl(d / "docs.jsonl", texts)
    out = str(d / "out")
    build(BuildConfig.of(inputs=(src,), out=out, seq_len=128, workers=1))
    return out
