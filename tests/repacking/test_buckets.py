"""The dataset decomposition (packer/repacking/buckets.py): a pure function of document lengths."""

from __future__ import annotations

import numpy as np
import pytest

from packer.errors import PackerError
from packer.repacking import decompose, parse_buckets


def test_decompose_is_the_binary_expansion():
    p, dropped = decompose([5, 300, 1000, 20000], 256, 8192)
    got = sorted(zip(p.doc.tolist(), p.offset.tolist(), p.length.tolist()))
    assert got == [(1, 0, 256), (2, 0, 512), (2, 512, 256), (3, 0, 8192), (3, 8192, 8192), (3, 16384, 2048),
                   (3, 18432, 1024), (3, 19456, 512)]
    assert dropped == {"document_under_min": {"documents": 1, "tokens": 5},
                       "tail_under_min": {"documents": 3, "tokens": 44 + 232 + 32}}
    rng = np.random.default_rng(0)
    n = rng.integers(1, 40000, 500)
    p, dropped = decompose(n, 64, 4096)
    assert set(p.length.tolist()) <= {64 << k for k in range(7)}
    assert int(p.length.sum()) + sum(d["tokens"] for d in dropped.values()) == int(n.sum())
    assert (np.lexsort((p.offset, p.doc, p.length)) == np.arange(len(p.doc))).all()  # sorted, deterministic


def test_parse_buckets_refuses_what_is_not_two_powers_of_two():
    assert parse_buckets("256:8192") == (256, 8192) == parse_buckets((256, 8192))
    for bad in ("256", "300:8192", "512:256", "a:b", (0, 8)):
        with pytest.raises(PackerError):
            parse_buckets(bad)
