"""The data of the H200 training benchmarks: web-like documents, packer builds of them, and batches.

- ``weblike_lengths`` / ``weblike_tokens``: lognormal lengths (median 600, sigma 1.2, clipped to
  [16, 65536]) of random ids with EOS last;
- ``write_build``: documents packed by ``packer.pack`` and written by ``packer.shards`` as a build;
- ``read_documents``: every document of a build back, whole and in order (nothing lost);
- ``padded_batches`` (one document or chunk per row) and ``packed_batches`` (PackedDataset rows).

bench/hf_attention.py trains on them (tests/test_gpu_train_smoke.py holds them exact). The one-GPU
training benchmark of issue 8 that they came with (examples/train_gpt.py's GPT, variants A-F, the
plan and its report; docs/benchmarks.md, "GPU training") is at commit 99450b8: bench/gpu_train.py
and bench/gpu/ there.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from packer import shards as S
from packer.io import atomic_write, write_json
from packer.pack import pack
from packer.train.dataset import PackedDataset
from packer.train.sampler import PackedSampler

IGNORE = -100  # the label of a slot that is not trained
SEED = 0
GPT2_VOCAB = 50257  # ids 0..50256; 50256 is <|endoftext|>


def weblike_lengths(n_docs: int, seed: int = SEED) -> np.ndarray:
    """Token lengths of the web-like corpus: lognormal, median 600, sigma 1.2, clipped to [16, 65536]."""
    rng = np.random.default_rng([seed, 1])
    return np.clip(np.round(rng.lognormal(math.log(600), 1.2, n_docs)), 16, 65536).astype(np.int64)


def weblike_tokens(lengths: np.ndarray, vocab: int = GPT2_VOCAB, seed: int = SEED) -> np.ndarray:
    """Random ids < vocab - 1 with EOS (vocab - 1; GPT-2: 50256) as the last token of each document, flat."""
    rng = np.random.default_rng([seed, 2])
    tok = rng.integers(0, vocab - 1, size=int(lengths.sum()), dtype=np.dtype(S.dtype_for_vocab(vocab)))
    tok[np.cumsum(lengths) - 1] = vocab - 1
    return tok


def write_build(out: str, tokens: np.ndarray, lengths: np.ndarray, seq_len: int, *, vocab_size: int, eos_id: int,
                pad_id: int, name: str, unit_docs: int = 5000) -> dict:
    """Documents (flat ``tokens``, ``lengths``) packed with ``packer.pack`` (bfd) and written as a packer
    build with ``packer.shards``: one shard per ``unit_docs`` documents, as ``packer build`` makes one
    per work unit. Returns the manifest."""
    os.makedirs(os.path.join(out, S.SHARD_DIR), exist_ok=True)
    for f in os.listdir(os.path.join(out, S.SHARD_DIR)):
        os.unlink(os.path.join(out, S.SHARD_DIR, f))
    if os.path.exists(os.path.join(out, S.MANIFEST)):
        os.unlink(os.path.join(out, S.MANIFEST))
    dtype = S.dtype_for_vocab(vocab_size)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    shards, totals = [], {"documents": 0, "tokens": 0, "rows": 0, "padding": 0, "pieces": 0, "documents_split": 0}
    for u, a in enumerate(range(0, len(lengths), unit_docs)):
        ln = lengths[a:a + unit_docs]
        lay = pack(ln, seq_len, "bfd")
        buf = np.full(lay.num_rows * seq_len, pad_id, dtype=dtype)
        src = (starts[a] + np.concatenate([[0], np.cumsum(ln)])[lay.doc] + lay.offset).tolist()
        dst = (lay.row * seq_len + lay.slot).tolist()
        for s, d, n in zip(src, dst, lay.length.tolist()):
            buf[d:d + n] = tokens[s:s + n]
        table = S.shard_table(buf, seq_len, lay.row, lay.length, lay.doc, lay.offset, lay.num_rows)
        data = S.table_bytes(table)
        rel = f"{S.SHARD_DIR}/{u:06d}.arrow"
        atomic_write(os.path.join(out, rel), data)
        split = int((np.bincount(lay.doc, minlength=len(ln)) > 1).sum())
        rec = {"unit": u, "path": rel, "rows": lay.num_rows, "tokens": int(ln.sum()), "pieces": len(lay.length),
               "documents": len(ln), "documents_split": split, "padding": int(lay.padding), "bytes": len(data),
               S.CHECKSUM: S.checksum(data), "sources": []}
        shards.append(rec)
        for k in totals:
            totals[k] += rec[k]
    totals["slots"] = totals["rows"] * seq_len
    totals["padding_pct"] = round(100.0 * totals["padding"] / max(1, totals["slots"]), 4)
    manifest = {
        "format": S.FORMAT_NAME, "format_version": S.FORMAT_VERSION, "seq_len": seq_len, "dtype": dtype,
        "pad_id": pad_id, "eos_id": eos_id, "vocab_size": vocab_size, "checksum": S.CHECKSUM,
        "tokenizer": {"name": name, "kind": "synthetic", "vocab_size": vocab_size, "eos_id": eos_id,
                      "pad_id": pad_id, "fingerprint": name, "notes": [], "backend": "none", "backend_reason": ""},
        "settings": {"seq_len": seq_len, "pack": "bfd", "eos": True, "generator": name},
        "totals": totals, "shards": shards,
    }
    write_json(os.path.join(out, S.MANIFEST), manifest)
    return manifest


def read_documents(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Every document of a packer build, whole and in build order: (flat tokens, lengths).

    Pieces are regrouped by (shard, doc_index) and ordered by doc_offset; each
    document's pieces must tile it from offset 0 with no gap, and the total
    must equal the manifest's token count (nothing lost).
    """
    m = S.read_manifest(path)
    L, dt = int(m["seq_len"]), m["dtype"]
    toks, lens = [], []
    for sh in m["shards"]:
        t = S.open_shard(os.path.join(path, sh["path"]), L, dt)
        ids = t.column("input_ids").combine_chunks().flatten().to_numpy()

        def flat(col):
            return t.column(col).combine_chunks().flatten().to_numpy().astype(np.int64)

        counts = t.column("doc_lens").combine_chunks().value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
        plen, pdoc, poff = flat("doc_lens"), flat("doc_index"), flat("doc_offset")
        if not len(plen):
            continue
        ends = np.cumsum(plen)
        starts = ends - plen
        first = np.repeat(np.cumsum(counts) - counts, counts)  # each piece's row's first piece
        src = np.repeat(np.arange(len(counts)), counts) * L + starts - starts[first]
        order = np.lexsort((poff, pdoc))
        sd, so, sl, ss = pdoc[order], poff[order], plen[order], src[order]
        before = np.cumsum(sl) - sl
        expect = before - before[np.searchsorted(sd, sd, side="left")]
        if not np.array_equal(expect, so):
            raise ValueError(f"{sh['path']}: document pieces do not tile their documents")
        out = np.empty(int(sl.sum()), dtype=ids.dtype)
        for o, s, n in zip(before.tolist(), ss.tolist(), sl.tolist()):
            out[o:o + n] = ids[s:s + n]
        dl = np.bincount(sd, weights=sl).astype(np.int64)
        toks.append(out)
        lens.append(dl[dl > 0])
    tokens = np.concatenate(toks) if toks else np.zeros(0, np.uint16)
    lengths = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    want = int(m["totals"]["tokens"])
    if int(lengths.sum()) != want or len(tokens) != want:
        raise ValueError(f"{path}: read {int(lengths.sum())} tokens back, manifest says {want}")
    return tokens, lengths


def padded_batches(tokens, lengths, L: int, B: int, n: int, pad_id: int, chunks: bool, seed: int = SEED) -> list[dict]:
    """``n`` batches of B rows, one document (``chunks``: one chunk of at most L) per row, padded to L.

    Documents (chunks) are taken in a seeded random order. labels: the ids,
    -100 at slot 0 and on padding; positions 0..L-1.
    """
    starts = np.cumsum(lengths) - lengths
    if chunks:
        k = -(-lengths // L)
        doc = np.repeat(np.arange(len(lengths)), k)
        rank = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
        item_start = starts[doc] + rank * L
        item_len = np.minimum(L, lengths[doc] - rank * L)
    else:
        item_start, item_len = starts, np.minimum(lengths, L)
    perm = np.random.default_rng([seed, 3, int(chunks)]).permutation(len(item_len))
    perm = np.resize(perm, n * B)  # wraps around if the corpus is smaller than the run
    out = []
    for b in range(n):
        ids = np.full((B, L), pad_id, dtype=np.int64)
        lab = np.full((B, L), IGNORE, dtype=np.int64)
        lens = item_len[perm[b * B:(b + 1) * B]]
        for r, i in enumerate(perm[b * B:(b + 1) * B].tolist()):
            s, ln = int(item_start[i]), int(item_len[i])
            ids[r, :ln] = tokens[s:s + ln]
            lab[r, 1:ln] = ids[r, 1:ln]
        out.append({
            "input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(lab),
            "position_ids": torch.arange(L).expand(B, L).contiguous(),
            "useful": int(lens.sum()), "sum_l2": int((lens.astype(np.int64) ** 2).sum()),
        })
    return out


def packed_batches(ds: PackedDataset, B: int, n: int, start: int = 0) -> list[dict]:
    """Batches ``start .. start + n - 1`` of the packed order (PackedSampler, seed 0), built by
    ``PackedDataset.batch``."""
    order = PackedSampler(ds, seed=SEED).epoch_order()
    need = (start + n) * B
    if need > len(order):
        order = np.resize(order, need)
    out = []
    for j in range(start, start + n):
        b = ds.batch(order[j * B:(j + 1) * B])
        dl = b["_doc_lens"].numpy().astype(np.int64)
        out.append({k: b[k] for k in ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens", "max_seqlen")}
                   | {"useful": int(dl.sum()), "sum_l2": int((dl ** 2).sum())})
    return out
