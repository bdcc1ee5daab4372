"""The repack unit on chat builds (packer/repacking/unit.py): conversations are never split; at a shorter
length one over it is dropped (too_long, counted) or, for a --truncate build, cut, exactly as a fresh
``packer build --chat`` at that length does; at a longer one, what the source dropped or cut is said."""

from __future__ import annotations

import json

import numpy as np
import pytest

from packer import build, repack
from packer.repacking.source import Documents
from packer.repacking.unit import RepackJob, RepackUnit, fit_conversations

from .conftest import shard_bytes

pytest.importorskip("jinja2")


@pytest.fixture(scope="module")
def chat_input(tmp_path_factory, small_family):
    """(jsonl of conversations of many lengths, a tokenizer folder with a ChatML template)."""
    from ..chat_data import chatml_tokenizer_folder, conversations
    from ..conftest import copy_family

    root = tmp_path_factory.mktemp("chat_repack")
    folder = chatml_tokenizer_folder(copy_family(small_family, "gpt2-like", root / "gpt2-like"))
    with open(root / "c.jsonl", "w") as f:
        for r in conversations(80, seed=3, max_reply=4, max_turns=3):
            f.write(json.dumps(r) + "\n")
    return str(root / "c.jsonl"), folder


@pytest.mark.parametrize("truncate", [False, True])
def test_a_chat_repack_to_a_shorter_length_equals_a_fresh_chat_build(chat_input, tmp_path, truncate):
    data, folder = chat_input
    kw = dict(tokenizer=folder, chat=True, workers=1, truncate=truncate, unit_mb=0.01)
    long, short, out = (str(tmp_path / n) for n in ("long", "short", "r"))
    build([data], long, seq_len=1024, **kw)
    fresh = build([data], short, seq_len=256, **kw).manifest
    m = repack(long, out, seq_len=256).manifest
    assert shard_bytes(out) == shard_bytes(short)
    assert len(m["shards"]) > 1
    for k in ("documents", "tokens", "trained_tokens", "truncated", "rows"):
        assert m["totals"][k] == fresh["totals"][k], k
    if truncate:
        assert m["totals"]["truncated"] > 0
    else:  # dropped here as the fresh build dropped them (and those the source dropped, counted once)
        assert m["totals"]["skipped"]["too_long"] == fresh["totals"]["skipped"]["too_long"] > 0


def test_a_longer_length_says_what_only_a_rebuild_brings_back(chat_input, tmp_path):
    data, folder = chat_input
    short, out = str(tmp_path / "short"), str(tmp_path / "r")
    src = build([data], short, seq_len=256, tokenizer=folder, chat=True, workers=1).manifest
    res = repack(short, out, seq_len=1024)
    lost = src["totals"]["skipped"]["too_long"]
    assert lost > 0 and any(f"{lost:,} conversation(s) were skipped" in n and "rebuild" in n for n in res.notes)
    assert res.manifest["totals"]["skipped"]["too_long"] == lost  # still counted, never silently gone
    assert res.manifest["totals"]["documents"] == src["totals"]["documents"]


def _docs(lengths):
    lengths = np.asarray(lengths, np.int64)
    tokens = np.arange(int(lengths.sum()), dtype=np.uint16)
    return Documents(tokens, lengths, (tokens % 2).astype(np.uint8))


def test_fit_conversations_drops_or_cuts_exactly_those_over_the_length():
    job = RepackJob("o", 4, "bfd", 0, "uint16", chat=True, truncate=False)
    unit = RepackUnit(0, "src", 8, {"path": "shards/000000.arrow"})
    docs, dropped, cut = fit_conversations(job, unit, _docs([3, 6, 4, 5]))
    assert docs.lengths.tolist() == [3, 4] and cut == 0
    assert docs.tokens.tolist() == [0, 1, 2, 9, 10, 11, 12] and docs.mask.tolist() == [0, 1, 0, 1, 0, 1, 0]
    assert dropped == ["src/shards/000000.arrow document 1", "src/shards/000000.arrow document 3"]
    job = RepackJob("o", 4, "bfd", 0, "uint16", chat=True, truncate=True)
    docs, dropped, cut = fit_conversations(job, unit, _docs([3, 6, 4, 5]))
    assert docs.lengths.tolist() == [3, 4, 4, 4] and dropped == [] and cut == 2
    assert docs.tokens.tolist() == [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16]
    text = RepackJob("o", 4, "bfd", 0, "uint16", chat=False, truncate=False)
    same = _docs([3, 6])
    assert fit_conversations(text, unit, same)[0] is same  # text documents are split across rows, never dropped
