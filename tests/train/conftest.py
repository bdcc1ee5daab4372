"""A build whose rows hold several documents each (so attention could mix them)."""

from __future__ import annotations

import json
import os
import random

import pytest

from ..conftest import write_jsonl


@pytest.fixture(scope="session", autouse=True)
def datasets_cache(tmp_path_factory):
    """datasets' cache folder (where hf_dataset keeps its columns, and map/filter theirs) in a scratch folder."""
    try:
        import datasets.config
    except ImportError:
        yield None
        return
    old = datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = tmp_path_factory.mktemp("hf_datasets_cache")
    yield datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = old


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


@pytest.fixture(scope="session")
def chat_build(tmp_path_factory, small_family):
    """(out, tokenizer.json) of a --chat build (ChatML template, a small byte-level BPE trained here): several conversations a row."""
    from packer import build

    from ..chat_data import chatml_tokenizer_folder, conversations
    from ..conftest import copy_family

    root = tmp_path_factory.mktemp("trl_chat")
    folder = chatml_tokenizer_folder(copy_family(small_family, "gpt2-like", root / "gpt2-like"))
    path = os.path.join(folder, "tokenizer.json")
    with open(root / "c.jsonl", "w") as f:
        for r in conversations(60, seed=1, max_reply=1, max_turns=2):
            f.write(json.dumps(r) + "\n")
    out = str(root / "out")
    build([str(root / "c.jsonl")], out, seq_len=512, tokenizer=folder, chat=True, workers=1)
    return out, path
