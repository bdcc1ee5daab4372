"""A build's progress as the Python API reports it (packer/pipeline/progress.py): ``build(progress=callback)``
is called with input bytes tokenized, documents, tokens, units; every figure only grows, and the bytes are
the work's, not the reader's look-ahead (issue 55.4)."""

from __future__ import annotations

import os

import pytest

from packer import build
from tests.conftest import write_jsonl


@pytest.mark.parametrize("workers", [1, 2])
def test_the_callback_gets_growing_counts_that_follow_the_work_inside_one_unit(tmp_path, workers):
    docs = 3000
    path = write_jsonl(tmp_path / "c.jsonl", [f"document {i} " + "lorem ipsum dolor sit amet " * 36 for i in range(docs)])
    calls = []
    build(path, str(tmp_path / "out"), seq_len=256, workers=workers, progress=lambda *a: calls.append(a))
    done, ndocs, tokens, units_done, units, total = zip(*calls)
    for figure in (done, ndocs, tokens, units_done):
        assert list(figure) == sorted(figure), calls  # monotonic
    assert units == (1,) * len(calls) and done[-1] == total[0] and ndocs[-1] == docs and units_done[-1] == 1
    assert calls[0][:4] == (0, 0, 0, 0)  # told at once, before any work
    inside = [c for c in calls if c[3] == 0 and 0 < c[0] < total[0]]
    assert len({c[0] for c in inside}) >= 2, calls  # it moves inside the one unit (2.9 MB)
    for b, d, *_ in inside:  # alike documents: the bytes done follow the documents tokenized, not the bytes read
        assert abs(b / total[0] - d / docs) < 0.05, (b, d, calls)


def test_a_tqdm_bar_is_driven_over_the_input_bytes(tmp_path):
    import io

    from tqdm import tqdm

    path = write_jsonl(tmp_path / "c.jsonl", [f"document {i} " + "lorem ipsum " * 50 for i in range(400)])
    bar = tqdm(file=io.StringIO(), unit="B")
    build(path, str(tmp_path / "out"), seq_len=256, workers=1, progress=bar)
    assert bar.total == bar.n == os.path.getsize(path)
    assert "400 docs" in bar.postfix and "units 1/1" in bar.postfix
