"""bench/gpu_train.py (the H200 benchmark of issue 8) runs its tiny CPU plan, and its data helpers are exact.

The GPU run itself cannot happen in CI; this guards the code paths it shares
with the CPU (preparation, padded and packed batches, the model, the training
step, the loader task, the correctness check) so the script works first time
on the GPU host. What needs CUDA (flex backward, varlen) must be recorded as
skipped with a reason, not crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import load_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "bench", "gpu_train.py")


def load_bench():
    return load_script("bench/gpu_train.py")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_train")
    out = subprocess.run(
        [sys.executable, SCRIPT, "--device", "cpu", "--tiny", "--plan", "part1", "--budget-s", "240",
         "--out", str(tmp / "out"), "--data-dir", str(tmp / "data"),
         "--real", os.path.join(REPO, "sample_data", "corpus.jsonl"), "--tokenizer", "bytes"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open(tmp / "out" / "gpu_train_part1.json") as f:
        return json.load(f), out.stdout


def test_tiny_plan_runs_every_task_or_says_why_not(tiny_run):
    doc, stdout = tiny_run
    res = doc["results"]
    assert res and not [r for r in res if r["status"] == "error"]
    for r in res:
        if r["status"] == "skipped":  # only what needs CUDA, with the reason
            assert r["task"] == "train" and r["var"] in ("D", "E") and "CUDA" in r["reason"], r
    trained = {(r["corpus"], r["seq"], r["var"]) for r in res if r["task"] == "train" and r["status"] == "ok"}
    for corpus in ("web", "real"):
        assert {(corpus, 128, v) for v in ("A", "A2", "C", "F")} <= trained
    assert {("web", 256, v) for v in ("A", "A2", "C")} <= trained
    for r in res:
        if r["task"] == "train" and r["status"] == "ok":
            assert r["loss_finite"] and 0 <= r["pad_pct"] < 100 and r["useful_tok_s"] <= r["slots_tok_s"]
    assert "| corpus | mode | seq | var |" in stdout  # the compact table comes last


def test_tiny_correctness_passes_and_the_unmasked_control_fails(tiny_run):
    doc, _ = tiny_run
    (c,) = [r for r in doc["results"] if r["task"] == "correct"]
    assert c["status"] == "ok" and c["all_pass"]
    by = {x["variant"]: x for x in c["checks"]}
    assert by["F dense"]["status"] == "pass" and by["F dense"]["grads_rel_err"] < 1e-4
    assert by["D flex"]["status"] == "pass"  # logits only: flex has no backward on CPU
    assert by["C no mask (control)"]["logits_rel_err"] > 1e-2  # attending across documents shows
    assert sum(c["pieces_per_row"]) > len(c["pieces_per_row"])  # the rows hold several documents


def test_tiny_loader_feeds_the_same_rows(tiny_run):
    doc, _ = tiny_run
    (r,) = [r for r in doc["results"] if r["task"] == "loader"]
    assert r["status"] == "ok" and r["rows_identical"]
    assert r["phases"]["loader"]["steps"] == r["phases"]["resident"]["steps"] == 2 * doc["cfg"]["loader_steps"]


def test_documents_come_back_whole_from_a_packed_build(tmp_path):
    gt = load_bench()
    lengths = gt.weblike_lengths(150)
    tokens = gt.weblike_tokens(lengths, vocab=1000)
    assert (tokens[np.cumsum(lengths) - 1] == 999).all() and tokens.max() == 999
    m = gt.write_build(str(tmp_path / "b"), tokens, lengths, 256, vocab_size=1000, eos_id=999, pad_id=999,
                       name="test", unit_docs=60)
    assert len(m["shards"]) == 3 and m["totals"]["tokens"] == int(lengths.sum())
    back, back_len = gt.read_documents(str(tmp_path / "b"))
    assert np.array_equal(back_len, lengths)  # every document, whole, in order
    assert np.array_equal(back, tokens)  # every token once, in order


def test_padded_batches_hold_one_document_or_chunk_per_row(tmp_path):
    gt = load_bench()
    lengths = np.array([5, 17, 8, 40, 1, 16], dtype=np.int64)
    tokens = np.arange(int(lengths.sum()), dtype=np.int64) % 50 + 1
    L = 16
    # A: one document per row, truncated; every document appears once when rows == documents.
    (a,) = gt.padded_batches(tokens, lengths, L, len(lengths), 1, pad_id=0, chunks=False)
    kept = np.minimum(lengths, L)
    assert a["useful"] == int(kept.sum()) and a["sum_l2"] == int((kept ** 2).sum())
    ids, lab = a["input_ids"].numpy(), a["labels"].numpy()
    starts = np.cumsum(lengths) - lengths
    rows = {tuple(r[r > 0]) for r in ids}
    assert rows == {tuple(tokens[s:s + k]) for s, k in zip(starts, kept)}
    # A2: chunks of at most L; all of them once covers every token exactly once.
    n_chunks = int((-(-lengths // L)).sum())
    (b,) = gt.padded_batches(tokens, lengths, L, n_chunks, 1, pad_id=0, chunks=True)
    ids, lab = b["input_ids"].numpy(), b["labels"].numpy()
    assert b["useful"] == int(lengths.sum()) == int((ids > 0).sum())
    assert np.array_equal(np.sort(ids[ids > 0]), np.sort(tokens))
    for r in range(n_chunks):  # labels: the ids inside a chunk, -100 at slot 0 and on padding
        n = int((ids[r] > 0).sum())
        assert lab[r, 0] == -100 and (lab[r, n:] == -100).all() and np.array_equal(lab[r, 1:n], ids[r, 1:n])


def test_packed_batches_count_useful_tokens_from_the_pieces(tmp_path):
    gt = load_bench()
    from packer.train.dataset import PackedDataset
    from packer.pack import pack

    lengths = gt.weblike_lengths(60)
    gt.write_build(str(tmp_path / "b"), gt.weblike_tokens(lengths, vocab=700), lengths, 128, vocab_size=700,
                   eos_id=699, pad_id=699, name="test")
    ds = PackedDataset(str(tmp_path / "b"))
    bs = gt.packed_batches(ds, 1, len(ds))  # every row once, in the sampler's order
    pieces = pack(lengths, 128).length
    assert sum(b["useful"] for b in bs) == int(lengths.sum())  # MFU's token count: non-padding slots
    assert sum(b["sum_l2"] for b in bs) == int((pieces ** 2).sum())  # its attention term: per piece
    assert sorted(int(b["input_ids"].sum()) for b in bs) == sorted(int(ds[i]["input_ids"].sum()) for i in range(len(ds)))
    for b in bs:
        seg = np.diff(b["cu_seqlens"].numpy())
        assert seg.sum() == b["input_ids"].numel() and b["useful"] <= seg.sum()
