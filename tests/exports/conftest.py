"""Builds to export: sample_data with a holdout (byte tokenizer, seq_len 256, several shards), a --no-eos
build, and the chat build of tests/train (ChatML, loss_mask); the documents each holds, read with pyarrow alone."""

from __future__ import annotations

import numpy as np
import pytest

from ..conftest import SAMPLE, read_documents
from ..train.conftest import chat_build  # noqa: F401 (the fixture, shared)


@pytest.fixture(scope="session")
def holdout_build(tmp_path_factory) -> str:
    from packer import build

    out = str(tmp_path_factory.mktemp("export_src") / "b")
    build([SAMPLE], out, seq_len=256, workers=1, unit_bytes=1 << 20, holdout=0.1, quiet=True)
    return out


@pytest.fixture(scope="session")
def no_eos_build(tmp_path_factory) -> str:
    from packer import build

    out = str(tmp_path_factory.mktemp("export_noeos") / "b")
    build([SAMPLE], out, seq_len=256, workers=1, unit_bytes=1 << 20, eos=False, quiet=True)
    return out


def documents(build: str) -> list[np.ndarray]:
    return read_documents(build)[0]


def flat(docs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(docs) if docs else np.zeros(0, np.int64)
