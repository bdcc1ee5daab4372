"""Shared fixtures: tokenizers, small corpora and finished builds."""

from __future__ import annotations

import json
import os
import shutil

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "sample_data")
# Engine checks are recorded per machine (packer/tokenize/check_cache.py): the tests keep their own record.
os.environ.setdefault("PACKER_CACHE", os.path.join(__import__("tempfile").mkdtemp(prefix="packer-test-cache-")))
SHARED = os.path.abspath(os.path.join(REPO, "..", "shared", "data"))
if os.environ.get("PACKER_TEST_NO_SHARED"):  # run as a fresh clone would, without ../shared
    SHARED = os.path.join(REPO, "no-such-shared-folder")
GPT2 = os.path.join(SHARED, "gpt2-tokenizer.json")
# The real files, used when present (tests skip cleanly without them).
REAL_TOKENIZERS = {"gpt2": GPT2, "llama3": os.path.join(SHARED, "llama3"),
                   "mistral-v3": os.path.join(SHARED, "mistral-v3"), "minilm": os.path.join(SHARED, "minilm")}


@pytest.fixture(scope="session")
def gpt2_path(tmp_path_factory) -> str:
    """The real GPT-2 tokenizer.json where ../shared/data has it; else a small byte-level BPE of the same
    layout (GPT-2 pattern, <|endoftext|>, truncation max_length 50 set), built now (bench/families.py)."""
    if os.path.exists(GPT2):
        return GPT2
    fam = load_script("bench/families.py")
    return os.path.join(fam.build_all(str(tmp_path_factory.mktemp("gpt2_like")), names=["gpt2-like"])["gpt2-like"],
                        "tokenizer.json")


@pytest.fixture(scope="session")
def real_gpt2() -> str:
    """The real GPT-2 file only (tests of its exact ids or size)."""
    if not os.path.exists(GPT2):
        pytest.skip("../shared/data/gpt2-tokenizer.json not present")
    return GPT2


def write_jsonl(path, texts, field="text"):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({field: t}) + "\n")
    return str(path)


@pytest.fixture(scope="session")
def sample_build(tmp_path_factory) -> str:
    """sample_data built with the built-in byte tokenizer, seq_len 256, small units."""
    from packer import BuildConfig, build

    out = str(tmp_path_factory.mktemp("sample") / "out")
    build(BuildConfig.of(inputs=(SAMPLE,), out=out, seq_len=256, workers=1, unit_bytes=1 << 20))
    return out


@pytest.fixture(scope="session")
def sample_build_gpt2(tmp_path_factory, gpt2_path) -> str:
    """sample_data built with the real GPT-2 tokenizer, seq_len 512."""
    from packer import BuildConfig, build

    out = str(tmp_path_factory.mktemp("sample_gpt2") / "out")
    build(BuildConfig.of(inputs=(SAMPLE,), out=out, seq_len=512, tokenizer=gpt2_path, workers=1, unit_bytes=1 << 20))
    return out


@pytest.fixture
def copy_build(tmp_path):
    """Copy a finished build to a scratch folder (for tests that damage it)."""

    def _copy(src: str) -> str:
        dst = str(tmp_path / "copy")
        shutil.copytree(src, dst)
        return dst

    return _copy


def load_script(relpath: str):
    """A script of the repo (examples/, bench/) imported as a module, once per session.

    Registered in sys.modules before it runs: dataclasses look their module up then.
    """
    import importlib.util
    import sys

    name = os.path.splitext(os.path.basename(relpath))[0]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relpath))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]
