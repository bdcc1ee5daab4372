"""GPU training benchmark: useful tokens/s of packed rows (packer) against padded rows.

One script, one GPU, one or two runs of under 9 minutes each (issue 8)::

    python bench/gpu_train.py --plan part1 --budget-s 500     # eager, seq 2048, both corpora, correctness, loader
    python bench/gpu_train.py --plan part2 --budget-s 500     # compiled blocks (MFU), seq 8192, loader (compiled)
    python bench/gpu_train.py --device cpu --tiny --plan all  # CPU smoke run of every code path (tests use it)

The model is GPT-2-small-class, in plain PyTorch, identical in every variant
(/work/shared/gpu-reference.md describes the design this follows): 12 layers,
d_model 768, 12 heads, vocab 50304, RMSNorm, GELU(tanh) MLP 4x, RoPE from
``position_ids``, tied embedding, no biases; fp32 master weights, bf16
autocast, fused AdamW, fp32 cross-entropy with ``ignore_index=-100``. Each
step has ``--slots`` token slots (65,536: 32 x 2048 or 8 x 8192).

Data (prepared on the host, cached under ``--data-dir``):

- ``real``: ``packer build`` (the CLI, ``python -m packer.cli build``) of a
  real-text corpus (``--real``, default ``.carry/real.jsonl.zst``) with the
  GPT-2 tokenizer (``--tokenizer``), at each seq_len.
- ``web``: a web-like length distribution (lognormal, median 600, sigma 1.2,
  clipped to [16, 65536], ``--web-docs`` documents, seed 0) of random token ids
  < 50256 with EOS (50256) as each document's last token, packed by packer's
  own ``pack()`` (best-fit decreasing, as ``packer build``) and written as
  packer shards by ``packer.shards``. Random ids because the speed of a step
  does not depend on which ids it sees, only on the lengths; the real corpus
  is there to show it on text.

Variants (rows of ``--slots`` slots; "useful" = non-padding tokens):

- ``A``  one document per row, truncated at seq_len, padded; causal SDPA.
- ``A2`` documents cut into chunks of at most seq_len, one chunk per row, padded; causal SDPA.
- ``C``  packed rows (PackedDataset), plain causal attention over the whole
  row, positions 0..L-1: the contaminated baseline (FA2: cuDNN SDPA is off).
- ``C0`` C with SDPA's default backend (cuDNN on this GPU); extra.
- ``D``  packed rows, document mask through flex attention, ``BlockMask``
  from ``packer.block_mask`` (built every step, inside the timed step).
- ``E``  packed rows through ``torch.nn.attention.varlen.varlen_attn`` with
  packer's ``cu_seqlens`` / ``max_seqlen``.
- ``F``  packed rows, dense (B, 1, L, L) mask from ``packer.dense_mask`` through SDPA (default backend).

A, A2 read their documents back out of the same packer shards (pieces
regrouped by ``doc_index``/``doc_offset``: every document, whole). C, C0, D,
E, F see the identical rows (PackedSampler order, seed 0). Batches are moved
to the GPU before timing, except in the loader task, where ``D`` is fed by
``PackedLoader`` (workers, pin_memory, non_blocking copies) and compared,
interleaved on the same model, with the same rows already on the GPU.

Modes: ``eager`` (only flex_attention and create_block_mask are compiled)
and ``compiled`` (every block compiled with ``torch.compile``; varlen runs
outside the graph). Timing: CUDA events around the timed steps, after
warm-up (compile time is in warm-up). MFU = (6 N useful + 6 layers d sum(l^2))
/ time / peak, where l runs over the document segments trained (attention
counted within documents only, for every variant), N = parameters (the
tied embedding once, as the lm_head matmul); peak 790 TFLOP/s (the bf16
matmul rate measured on this machine, as the reference) and, in the
``MFU spec`` column, 989 TFLOP/s (the datasheet's dense bf16).

Correctness: two packed rows (the most documents among the first rows of
the web-like build) through the same model with flex, varlen and dense masks
against every document run alone (causal SDPA, positions from 0): relative
L2 error of logits and of all parameter gradients, bf16 autocast and fp32;
no mask (C) as the control that must fail.

Output: one line per finished task as it finishes, a compact table last;
full JSON and a Markdown table in ``$OUT`` (default ``bench_out/gpu``),
rewritten after every task. A task that fails is recorded with its error
and the run goes on; a task that would not fit in what is left of
``--budget-s`` is recorded as skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from packer import shards as S
from packer.io import atomic_write, write_json
from packer.train.dataset import PackedDataset
from packer.train.masks import block_mask, dense_mask
from packer.pack import pack
from packer.train.sampler import PackedLoader, PackedSampler

IGNORE = -100
SEED = 0
GPT2_VOCAB = 50257  # ids 0..50256; 50256 is <|endoftext|>
PEAK_MEASURED = 790e12  # bf16 matmul on random data, measured on this H200 (KINDS.md; reference MFU)
PEAK_SPEC = 989e12  # H100/H200 SXM datasheet, dense bf16

VARIANTS = {
    "A": "one doc per row, padded",
    "A2": "chunks of docs, one per row, padded",
    "C": "packed, no mask (contaminated)",
    "C0": "packed, no mask, cuDNN SDPA",
    "D": "packed + flex doc mask",
    "E": "packed + varlen_attn",
    "F": "packed + dense mask (SDPA)",
}
ATTN = {"A": "causal", "A2": "causal", "C": "causal", "C0": "causal", "D": "flex", "E": "varlen", "F": "dense"}
PACKED = ("C", "C0", "D", "E", "F")


class BudgetExceeded(BaseException):
    """Raised by SIGALRM when --budget-s runs out (BaseException: a task's except Exception lets it through)."""


# ---------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class Cfg:
    """What the run does; see ``parse`` for the meaning of each flag."""

    plan: str
    device: str
    tiny: bool
    budget_s: float
    out_dir: str
    data_dir: str
    real: str
    tokenizer: str | None
    real_mb: float | None
    web_docs: int
    web_vocab: int  # ids < web_vocab - 1, EOS = web_vocab - 1 (GPT-2: 50257)
    no_compile: bool
    only: tuple[str, ...]
    seqs: tuple[int, int]  # (short, long): 2048, 8192
    slots: int
    layers: int
    d_model: int
    heads: int
    steps: int
    warmup: int
    cwarmup: int
    loader_steps: int
    loader_workers: int
    build_workers: int
    lr: float = 3e-4

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")


def parse(argv=None) -> Cfg:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", choices=("part1", "part2", "all"), default="part1")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="2 layers, d 64, seq 128/256, a few steps (CPU smoke run)")
    p.add_argument("--budget-s", type=float, default=500.0, help="wall seconds for the whole run, preparation included")
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join("bench_out", "gpu"), help="where JSON/MD go ($OUT)")
    p.add_argument("--data-dir", default=os.path.join("bench_out", "gpu_data"), help="cache of prepared builds")
    p.add_argument("--real", default=None, help="real-text corpus for packer build (default .carry/real.jsonl.zst)")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json for --real (default .carry/gpt2-tokenizer.json; tiny: bytes); 'bytes' = built-in")
    p.add_argument("--real-mb", type=float, default=None, help="use only the first MB of --real (decompressed)")
    p.add_argument("--web-docs", type=int, default=None, help="documents in the web-like corpus (default 20000; tiny 150)")
    p.add_argument("--web-vocab", type=int, default=None, help="vocabulary of the web-like ids (default 50257 = GPT-2; tiny 512)")
    p.add_argument("--no-compile", action="store_true", help="skip the compiled-blocks tasks (CPU: inductor needs a C++ compiler and minutes)")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="run only the plan's tasks whose label holds TEXT (repeatable), e.g. 'compiled 8192'")
    p.add_argument("--seqs", default=None, help="short,long seq_len (default 2048,8192; tiny 128,256)")
    p.add_argument("--slots", type=int, default=None, help="token slots per step (default 65536; tiny 512)")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--steps", type=int, default=None, help="timed steps per variant (default 20; tiny 3)")
    p.add_argument("--warmup", type=int, default=None, help="eager warm-up steps (default 4; tiny 1)")
    p.add_argument("--cwarmup", type=int, default=None, help="compiled warm-up steps (default 6; tiny 1)")
    p.add_argument("--loader-steps", type=int, default=None, help="steps per loader/resident phase (default 24; tiny 4)")
    p.add_argument("--loader-workers", type=int, default=None, help="DataLoader workers (default 4; tiny 1)")
    p.add_argument("--build-workers", type=int, default=os.cpu_count() or 1)
    a = p.parse_args(argv)
    t = a.tiny

    def pick(v, big, small):
        return v if v is not None else (small if t else big)

    seqs = tuple(int(x) for x in a.seqs.split(",")) if a.seqs else ((128, 256) if t else (2048, 8192))
    if len(seqs) != 2:
        p.error("--seqs takes two values: short,long")
    here = "sample_data/corpus.jsonl" if t else ".carry/real.jsonl.zst"
    tok = a.tokenizer if a.tokenizer is not None else (None if t else ".carry/gpt2-tokenizer.json")
    if tok in ("", "bytes", "none"):
        tok = None
    return Cfg(
        plan=a.plan, device=a.device, tiny=t, budget_s=a.budget_s, out_dir=a.out, data_dir=a.data_dir,
        real=a.real or here, tokenizer=tok, real_mb=a.real_mb, web_docs=pick(a.web_docs, 20000, 150),
        web_vocab=pick(a.web_vocab, GPT2_VOCAB, 512), no_compile=a.no_compile, only=tuple(a.only),
        seqs=seqs, slots=pick(a.slots, 65536, 512), layers=pick(a.layers, 12, 2), d_model=pick(a.d_model, 768, 64),
        heads=pick(a.heads, 12, 2), steps=pick(a.steps, 20, 3), warmup=pick(a.warmup, 4, 1), cwarmup=pick(a.cwarmup, 6, 1),
        loader_steps=pick(a.loader_steps, 24, 4), loader_workers=pick(a.loader_workers, 4, 1),
        build_workers=max(1, a.build_workers),
    )


# ---------------------------------------------------------------------------
# Data: packer builds of the two corpora, documents read back from them


def _stamp_ok(path: str, stamp: dict) -> bool:
    try:
        with open(path + ".stamp.json") as f:
            return json.load(f) == stamp and os.path.exists(os.path.join(path, S.MANIFEST))
    except (OSError, ValueError):
        return False


def _write_stamp(path: str, stamp: dict) -> None:
    with open(path + ".stamp.json", "w") as f:
        json.dump(stamp, f)


def _subset(src: str, dst: str, mb: float) -> str:
    """The first ``mb`` MB (decompressed) of a .jsonl or .jsonl.zst, whole lines, as a plain .jsonl."""
    limit = int(mb * (1 << 20))
    if src.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(open(src, "rb"))
        f = io.BufferedReader(raw)
    else:
        f = open(src, "rb")
    n = 0
    with f, open(dst + ".tmp", "wb") as out:
        for line in f:
            out.write(line)
            n += len(line)
            if n >= limit:
                break
    os.replace(dst + ".tmp", dst)
    return dst


def prepare_real(cfg: Cfg, seq: int) -> dict:
    """``packer build`` of the real corpus at ``seq``; returns what was done (and the command)."""
    src = cfg.real
    if not os.path.exists(src) or os.path.getsize(src) == 0:
        raise FileNotFoundError(f"real corpus {src} is missing or empty")
    if cfg.tokenizer and not os.path.exists(cfg.tokenizer):
        raise FileNotFoundError(f"tokenizer {cfg.tokenizer} is missing")
    os.makedirs(cfg.data_dir, exist_ok=True)
    out = os.path.join(cfg.data_dir, f"real-{seq}")
    st = os.stat(src)
    stamp = {"src": os.path.abspath(src), "size": st.st_size, "mtime": int(st.st_mtime), "seq": seq,
             "tokenizer": cfg.tokenizer, "mb": cfg.real_mb}
    if _stamp_ok(out, stamp):
        return {"path": out, "cached": True}
    t0 = time.perf_counter()
    if cfg.real_mb:
        src = _subset(src, os.path.join(cfg.data_dir, f"real-first-{cfg.real_mb:g}mb.jsonl"), cfg.real_mb)
    cmd = [sys.executable, "-m", "packer.cli", "build", src, out, "--seq-len", str(seq),
           "--workers", str(cfg.build_workers), "--overwrite", "-q"]
    if cfg.tokenizer:
        cmd += ["--tokenizer", cfg.tokenizer]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"packer build failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}")
    _write_stamp(out, stamp)
    return {"path": out, "cached": False, "seconds": round(time.perf_counter() - t0, 2),
            "command": " ".join(cmd[1:])}


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


def prepare_web(cfg: Cfg, seq: int) -> dict:
    os.makedirs(cfg.data_dir, exist_ok=True)
    out = os.path.join(cfg.data_dir, f"web-{seq}")
    name = f"weblike-lognormal-median600-sigma1.2-n{cfg.web_docs}-vocab{cfg.web_vocab}-seed{SEED}"
    stamp = {"name": name, "seq": seq, "version": 1}
    if _stamp_ok(out, stamp):
        return {"path": out, "cached": True}
    t0 = time.perf_counter()
    lengths = weblike_lengths(cfg.web_docs)
    eos = cfg.web_vocab - 1
    write_build(out, weblike_tokens(lengths, cfg.web_vocab), lengths, seq, vocab_size=cfg.web_vocab, eos_id=eos,
                pad_id=eos, name=name)
    _write_stamp(out, stamp)
    return {"path": out, "cached": False, "seconds": round(time.perf_counter() - t0, 2),
            "how": "packer.pack (bfd) + packer.shards over random ids; see bench/gpu_train.py"}


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


# ---------------------------------------------------------------------------
# Batches (CPU, then moved to the device before timing)


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


def packed_order(ds: PackedDataset) -> np.ndarray:
    """The rows every packed variant reads, in order: PackedSampler, seed 0."""
    return PackedSampler(ds, seed=SEED).epoch_order()


def packed_batches(ds: PackedDataset, B: int, n: int, start: int = 0) -> list[dict]:
    """Batches ``start .. start + n - 1`` of the packed order, built by ``PackedDataset.batch``."""
    order = packed_order(ds)
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


def to_device(b: dict, device, non_blocking: bool = False) -> dict:
    return {k: (v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v) for k, v in b.items()}


# ---------------------------------------------------------------------------
# Model


@dataclass(frozen=True)
class ModelCfg:
    vocab: int
    d_model: int
    layers: int
    heads: int
    rope_base: float = 10000.0


# varlen boundaries of the current batch: read at call time by the attention
# op, which runs outside any compiled graph, so that a batch's own segment
# count and max_seqlen never become graph inputs (each new value would
# recompile a static graph).
_VARLEN: dict = {"cu": None, "max": 0}
_flex_compiled = None


@torch.compiler.disable
def _varlen_attention(q, k, v):
    """(B, L, H, D) each -> (B, L, H, D), causal within the segments of ``_VARLEN['cu']``."""
    from torch.nn.attention.varlen import varlen_attn

    B, L, H, D = q.shape
    cu, mx = _VARLEN["cu"], _VARLEN["max"]
    out = varlen_attn(q.reshape(B * L, H, D), k.reshape(B * L, H, D), v.reshape(B * L, H, D), cu, cu, mx, mx,
                      window_size=(-1, 0))  # (-1, 0): causal
    return out.view(B, L, H, D)


def _flex(q, k, v, bm):
    from torch.nn.attention.flex_attention import flex_attention

    if torch.compiler.is_compiling() or q.device.type != "cuda":
        return flex_attention(q, k, v, block_mask=bm)  # inside a compiled block: traced into it
    global _flex_compiled
    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
    return _flex_compiled(q, k, v, block_mask=bm)


def attend(kind: str, q, k, v, mask):
    """q, k, v: (B, L, H, D) -> (B, L, H, D)."""
    if kind == "varlen":
        return _varlen_attention(q, k, v)
    # One (B, H, L, D) contiguous layout for every kernel. Without it, inductor
    # (torch 2.13, CPU) fused the RoPE of q and k into flex_attention inside a
    # compiled block and got wrong outputs (relative error 0.6 against eager);
    # the layout costs one pointwise write that RoPE does anyway.
    q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    if kind == "causal":
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif kind == "flex":
        y = _flex(q, k, v, mask)
    elif kind == "dense":
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        raise ValueError(f"unknown attention {kind!r}")
    return y.transpose(1, 2)


def rope(x, cos, sin):
    """Rotary embedding (rotate-half); x (B, L, H, D), cos/sin (B, L, 1, D/2) fp32."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, c: ModelCfg):
        super().__init__()
        d = c.d_model
        self.heads = c.heads
        self.kind = "causal"
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.fc1 = nn.Linear(d, 4 * d, bias=False)
        self.fc2 = nn.Linear(4 * d, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, L, d = x.shape
        H = self.heads
        q, k, v = self.qkv(self.norm1(x)).view(B, L, 3, H, d // H).unbind(2)
        y = attend(self.kind, rope(q, cos, sin), rope(k, cos, sin), v, mask)
        x = x + self.proj(y.reshape(B, L, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c: ModelCfg):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = nn.RMSNorm(c.d_model)
        D = c.d_model // c.heads
        self.register_buffer("inv_freq", c.rope_base ** (-torch.arange(0, D, 2, dtype=torch.float32) / D), persistent=False)

    def set_attention(self, kind: str) -> None:
        for b in self.blocks:
            b.kind = kind

    def forward(self, ids, pos, mask):
        """(B, L) ids and positions -> (B, L, vocab) logits; lm_head tied to the embedding."""
        x = self.embed(ids)
        ang = pos[..., None].float() * self.inv_freq  # (B, L, D/2)
        cos, sin = ang.cos()[:, :, None], ang.sin()[:, :, None]
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return F.linear(self.norm(x), self.embed.weight)


def init_state(c: ModelCfg) -> dict:
    """The one initial state every variant starts from (seeded, on the CPU)."""
    torch.manual_seed(SEED)
    m = GPT(c)
    for mod in m.modules():
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            nn.init.normal_(mod.weight, std=0.02)
    return {k: v.clone() for k, v in m.state_dict().items()}


def n_params(c: ModelCfg) -> int:
    d = c.d_model
    return c.vocab * d + c.layers * (12 * d * d + 2 * d) + d


# ---------------------------------------------------------------------------
# One training step


def make_mask(kind: str, b: dict, cuda: bool):
    """The attention input of one batch, built inside the timed step (as a trainer would)."""
    if kind == "flex":
        return block_mask(b["document_ids"], compile=cuda)
    if kind == "dense":
        return dense_mask(b["document_ids"])
    if kind == "varlen":
        _VARLEN["cu"], _VARLEN["max"] = b["cu_seqlens"], int(b["max_seqlen"])
    return None


def loss_of(logits, labels):
    """Mean fp32 cross-entropy of predicting labels[t + 1] from logits[t] (labels unshifted, HF style)."""
    tgt = F.pad(labels[:, 1:], (0, 1), value=IGNORE)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt.reshape(-1), ignore_index=IGNORE)


def autocast(cfg: Cfg, dtype: str = "bf16"):
    if cfg.cuda and dtype == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(model, opt, b: dict, kind: str, cfg: Cfg):
    mask = make_mask(kind, b, cfg.cuda)
    with autocast(cfg):
        logits = model(b["input_ids"], b["position_ids"], mask)
    loss = loss_of(logits, b["labels"])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def fresh_model(cfg: Cfg, mc: ModelCfg, state: dict, kind: str, compiled: bool):
    with torch.device(cfg.device):
        model = GPT(mc)
    model.load_state_dict(state)
    model.set_attention(kind)
    if compiled:
        for blk in model.blocks:
            blk.compile(dynamic=False)
    kw = {"fused": True} if cfg.cuda else {}
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1, **kw)
    return model, opt


class Clock:
    """Marks on the device timeline (CUDA events) or the wall clock (CPU)."""

    def __init__(self, cuda: bool):
        self.cuda, self.marks = cuda, []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def intervals(self) -> list[float]:
        """Seconds between consecutive marks (synchronises)."""
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def sync(cfg: Cfg):
    if cfg.cuda:
        torch.cuda.synchronize()


def _graphs() -> int:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a diagnostic only
        return -1


def _sdpa_backend(var: str, cfg: Cfg) -> str:
    """cuDNN SDPA off except for C0 and F, so SDPA-causal rows run FlashAttention-2 (varlen's family)."""
    if not cfg.cuda:
        return "cpu"
    on = var in ("C0", "F")
    torch.backends.cuda.enable_cudnn_sdp(on)
    return "default (cuDNN)" if on else "cuDNN off (FA2)"


# ---------------------------------------------------------------------------
# The run: tasks, budget, results


@dataclass
class Corpus:
    name: str
    seq: int
    path: str
    ds: PackedDataset
    prep: dict
    docs: tuple | None = None  # (tokens, lengths), read on first need


@dataclass
class Run:
    cfg: Cfg
    t0: float = field(default_factory=time.perf_counter)
    results: list = field(default_factory=list)
    corpora: dict = field(default_factory=dict)
    failed_prep: dict = field(default_factory=dict)
    compiled_keys: set = field(default_factory=set)
    env: dict = field(default_factory=dict)
    mc: ModelCfg | None = None
    state: dict | None = None

    def left(self) -> float:
        return self.cfg.budget_s - (time.perf_counter() - self.t0)


def corpus(run: Run, name: str, seq: int) -> Corpus:
    key = (name, seq)
    if key in run.failed_prep:
        raise RuntimeError(f"preparing {name} at {seq} failed earlier: {run.failed_prep[key]}")
    if key not in run.corpora:
        try:
            prep = prepare_real(run.cfg, seq) if name == "real" else prepare_web(run.cfg, seq)
            ds = PackedDataset(prep["path"], verify=not prep["cached"])
        except Exception as e:
            run.failed_prep[key] = f"{type(e).__name__}: {e}"
            raise
        m = ds.builds[0].manifest
        prep.update(rows=len(ds), tokens=int(m["totals"]["tokens"]), documents=int(m["totals"]["documents"]),
                    padding_pct=float(m["totals"]["padding_pct"]), vocab_size=ds.vocab_size)
        run.corpora[key] = Corpus(name, seq, prep["path"], ds, prep)
        print(f"[prep] {name} seq {seq}: {prep}", flush=True)
    return run.corpora[key]


def model_for(run: Run, cp: Corpus) -> tuple[ModelCfg, dict]:
    """The model (config, initial state) every variant uses; sized for the corpora prepared so far."""
    if run.mc is None:
        c = run.cfg
        vocab = -(-max(k.ds.vocab_size for k in run.corpora.values()) // 64) * 64  # GPT-2: 50304
        run.mc = ModelCfg(vocab, c.d_model, c.layers, c.heads)
        run.state = init_state(run.mc)
    if cp.ds.vocab_size > run.mc.vocab:
        raise ValueError(f"{cp.name} has vocab {cp.ds.vocab_size} > the model's {run.mc.vocab}")
    return run.mc, run.state


def batches_for(run: Run, cp: Corpus, var: str, n: int) -> list[dict]:
    B = run.cfg.slots // cp.seq
    if var in ("A", "A2"):
        if cp.docs is None:
            cp.docs = read_documents(cp.path)
        tok, ln = cp.docs
        return padded_batches(tok, ln, cp.seq, B, n, cp.ds.pad_id, chunks=var == "A2")
    bs = packed_batches(cp.ds, B, n)
    if var in ("C", "C0"):  # no mask: positions run over the whole row
        for b in bs:
            b["position_ids"] = torch.arange(cp.seq).expand(B, cp.seq).contiguous()
    return bs


def _summary(times: list[float], useful: list[int], slots: int, sum_l2: list[int], mc: ModelCfg) -> dict:
    t = sum(times)
    u = sum(useful)
    flops = 6 * n_params(mc) * u + 6 * mc.layers * mc.d_model * sum(sum_l2)
    h = len(times) // 2
    halves = None
    if h:
        r1 = sum(useful[:h]) / sum(times[:h])
        r2 = sum(useful[h:]) / sum(times[h:])
        halves = round(abs(r1 - r2) / max(r1, r2), 4)
    return {
        "steps": len(times), "seconds": round(t, 4),
        "useful_tok_s": u / t, "slots_tok_s": slots * len(times) / t,
        "pad_pct": 100.0 * (1 - u / (slots * len(times))),
        "mfu_pct": 100.0 * flops / t / PEAK_MEASURED, "mfu_spec_pct": 100.0 * flops / t / PEAK_SPEC,
        "step_ms_median": 1e3 * float(np.median(times)), "step_ms_min": 1e3 * min(times), "step_ms_max": 1e3 * max(times),
        "halves_spread": halves,
    }


def _peak_reset(cfg: Cfg):
    if cfg.cuda:
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(cfg: Cfg):
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if cfg.cuda else None


def _cleanup(cfg: Cfg):
    _VARLEN["cu"] = None
    gc.collect()
    if cfg.cuda:
        torch.cuda.empty_cache()


def task_train(run: Run, t: dict) -> dict:
    cfg = run.cfg
    cp = corpus(run, t["corpus"], t["seq"])
    mc, state = model_for(run, cp)
    var, compiled = t["var"], t["mode"] == "compiled"
    kind = ATTN[var]
    if not cfg.cuda and kind in ("flex", "varlen"):
        return {"status": "skipped", "reason": f"{kind} training needs CUDA (flex has no backward on CPU; varlen is CUDA-only)"}
    warm = cfg.cwarmup if compiled else cfg.warmup
    backend = _sdpa_backend(var, cfg)
    bs = [to_device(b, cfg.device) for b in batches_for(run, cp, var, warm + cfg.steps)]
    model, opt = fresh_model(cfg, mc, state, kind, compiled)
    _peak_reset(cfg)
    tw = time.perf_counter()
    losses = [train_step(model, opt, b, kind, cfg) for b in bs[:warm]]
    sync(cfg)
    warm_s = time.perf_counter() - tw
    g0 = _graphs()
    clock = Clock(cfg.cuda)
    clock.mark()
    for b in bs[warm:]:
        losses.append(train_step(model, opt, b, kind, cfg))
        clock.mark()
    times = clock.intervals()
    g1 = _graphs()
    ls = torch.stack(losses).float().cpu()
    res = _summary(times, [b["useful"] for b in bs[warm:]], cfg.slots, [b["sum_l2"] for b in bs[warm:]], mc)
    res.update(status="ok", warmup_s=round(warm_s, 2), peak_gib=_peak_gib(cfg), sdpa=backend,
               loss_first=round(float(ls[0]), 4), loss_last=round(float(ls[-1]), 4),
               loss_finite=bool(torch.isfinite(ls).all()), graphs_new_in_timed_steps=g1 - g0 if g0 >= 0 else None,
               rows_per_step=cfg.slots // cp.seq)
    if compiled:
        run.compiled_keys.add((kind, cp.seq))
    del model, opt, bs
    return res


def task_loader(run: Run, t: dict) -> dict:
    """D fed by PackedLoader vs the same rows already on the device, interleaved on one model:
    loader, resident (same rows), loader, resident (same rows), ``loader_steps`` each."""
    cfg = run.cfg
    cp = corpus(run, t["corpus"], t["seq"])
    mc, state = model_for(run, cp)
    compiled = t["mode"] == "compiled"
    kind = "flex" if cfg.cuda else "dense"
    note = None if cfg.cuda else "CPU: the dense mask stands in for flex (no flex backward on CPU)"
    _sdpa_backend("D", cfg)
    B, T = cfg.slots // cp.seq, cfg.loader_steps
    warm = cfg.cwarmup if compiled else cfg.warmup
    n = warm + 2 * T
    resident = [to_device(b, cfg.device) for b in packed_batches(cp.ds, B, n)]
    W = cfg.loader_workers
    kw = {"prefetch_factor": 2} if W else {}
    loader = PackedLoader(cp.ds, B, sampler=PackedSampler(cp.ds, seed=SEED), num_workers=W,
                          pin_memory=cfg.cuda, drop_last=True, **kw)
    if len(loader) < n:
        return {"status": "skipped", "reason": f"{len(loader)} batches in the build, {n} needed"}
    waits, copies = [], []

    def fetch(it, j):
        a = time.perf_counter()
        b = next(it)
        c = time.perf_counter()
        out = to_device(b, cfg.device, non_blocking=True)
        waits.append(c - a)
        copies.append(time.perf_counter() - c)
        out["useful"], out["sum_l2"] = resident[j]["useful"], resident[j]["sum_l2"]
        return out

    model, opt = fresh_model(cfg, mc, state, kind, compiled)
    _peak_reset(cfg)
    it = iter(loader)
    try:
        same = True
        for j in range(warm):  # warm-up from the loader; check it reads the resident rows
            b = fetch(it, j)
            same &= bool(torch.equal(b["input_ids"], resident[j]["input_ids"]))
            train_step(model, opt, b, kind, cfg)
        sync(cfg)
        phases = {"loader": [], "resident": []}
        stall = {"wait_ms": [], "copy_launch_ms": []}
        for p in range(2):
            rows = range(warm + p * T, warm + (p + 1) * T)
            waits.clear()
            copies.clear()
            clock = Clock(cfg.cuda)
            clock.mark()
            for j in rows:
                train_step(model, opt, fetch(it, j), kind, cfg)
                clock.mark()
            phases["loader"].append(clock.intervals())
            stall["wait_ms"].append(round(1e3 * sum(waits), 2))
            stall["copy_launch_ms"].append(round(1e3 * sum(copies), 2))
            clock = Clock(cfg.cuda)
            clock.mark()
            for j in rows:
                train_step(model, opt, resident[j], kind, cfg)
                clock.mark()
            phases["resident"].append(clock.intervals())
    finally:
        del it
    useful = [b["useful"] for b in resident[warm:]]
    l2 = [b["sum_l2"] for b in resident[warm:]]
    out = {}
    for name, ts in phases.items():
        out[name] = _summary(ts[0] + ts[1], useful, cfg.slots, l2, mc)
    ratio = out["loader"]["useful_tok_s"] / out["resident"]["useful_tok_s"]
    per_phase = [sum(r) / sum(lo) for lo, r in zip(phases["loader"], phases["resident"])]
    # What the loader alone delivers (no training), for comparison with the step rate.
    lo = PackedLoader(cp.ds, B, sampler=PackedSampler(cp.ds, seed=SEED + 1), num_workers=W, pin_memory=cfg.cuda,
                      drop_last=True, **kw)
    it2, m = iter(lo), min(len(lo), max(8, T))
    next(it2)
    a = time.perf_counter()
    for _ in range(m - 1):
        next(it2)
    alone = (m - 1) / (time.perf_counter() - a)
    del it2
    steps_s = 1 / (out["resident"]["step_ms_median"] / 1e3)
    res = {
        "status": "ok", "attention": kind, "note": note, "rows_identical": same, "workers": W, "pin_memory": cfg.cuda,
        "loader_over_resident": round(ratio, 4), "per_phase_ratio": [round(x, 4) for x in per_phase],
        "loader_alone_batches_s": round(alone, 1), "gpu_steps_s": round(steps_s, 2),
        "loader_headroom": round(alone / steps_s, 1), "main_thread": stall, "peak_gib": _peak_gib(cfg),
        "phases": out, "rows_per_step": B,
    }
    if compiled:
        run.compiled_keys.add((kind, cp.seq))
    del model, opt, resident
    return res


def _pick_rows(ds: PackedDataset, n: int = 2, among: int = 512) -> list[int]:
    """The ``n`` rows with the most pieces among the first ``among``, one with a padding tail if any."""
    b = ds.batch(list(range(min(among, len(ds)))))
    at = b["_piece_at"]
    pieces = np.diff(at)
    dl = b["_doc_lens"].numpy().astype(np.int64)
    used = np.add.reduceat(dl, at[:-1]) if len(dl) else np.zeros(len(pieces))
    order = np.argsort(-pieces, kind="stable")
    rows = [int(order[0])]
    tail = [int(r) for r in order if used[r] < ds.seq_len]
    if tail and tail[0] not in rows:
        rows.append(tail[0])
    for r in order:
        if len(rows) >= n:
            break
        if int(r) not in rows:
            rows.append(int(r))
    return rows[:n]


CORRECT_TOL = {"bf16": {"logits": 2e-2, "grads": 5e-2}, "fp32": {"logits": 1e-3, "grads": 1e-3}}
CHECK_NAMES = {"flex": "D flex", "varlen": "E varlen", "dense": "F dense", "causal": "C no mask (control)"}


def task_correct(run: Run, t: dict) -> dict:
    """Packed rows with the mask against every document run alone: logits and gradients.

    eager: two rows with many documents (one with a padding tail if any),
    bf16 autocast and fp32 (CUDA), flex / varlen / dense / no mask.
    compiled: the first training batch of the packed order (the shape the
    compiled D graph was built for, so no new compile), flex, bf16.
    The reference runs each document piece alone through the eager model
    (causal SDPA, positions from 0); loss = sum of token losses / tokens of
    the whole batch, so the gradients are comparable.
    """
    cfg = run.cfg
    cp = corpus(run, t["corpus"], t["seq"])
    mc, state = model_for(run, cp)
    compiled = t["mode"] == "compiled"
    _sdpa_backend("D", cfg)
    ds, L = cp.ds, cp.seq
    if compiled:
        rows = packed_order(ds)[:cfg.slots // L].tolist()
        dtypes, kinds = ("bf16",) if cfg.cuda else ("fp32",), ["flex"]
    else:
        rows = _pick_rows(ds)
        dtypes = ("bf16", "fp32") if cfg.cuda else ("fp32",)
        kinds = ["flex", "varlen", "dense", "causal"] if cfg.cuda else ["flex", "dense", "causal"]
    cpu_batch = ds.batch(rows)
    at, dl = cpu_batch["_piece_at"], cpu_batch["_doc_lens"].numpy().astype(np.int64)
    pieces = []  # (row, slot, length)
    for r in range(len(rows)):
        s = 0
        for ln in dl[at[r]:at[r + 1]].tolist():
            pieces.append((r, s, ln))
            s += ln
    batch = to_device({k: cpu_batch[k] for k in ("input_ids", "labels", "position_ids", "document_ids",
                                                 "cu_seqlens", "max_seqlen")}, cfg.device)
    tgt = F.pad(batch["labels"][:, 1:], (0, 1), value=IGNORE)
    n_tgt = int((tgt != IGNORE).sum())
    out = {"rows": rows if len(rows) <= 4 else f"first training batch ({len(rows)} rows)",
           "pieces": len(pieces), "pieces_per_row": [int(at[r + 1] - at[r]) for r in range(len(rows))][:8],
           "seq": L, "mode": t["mode"], "tolerance": CORRECT_TOL, "checks": []}
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for dt in dtypes:
            torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
            # Reference: every piece alone, causal attention, positions from 0, eager.
            model, _ = fresh_model(cfg, mc, state, "causal", False)
            ref = []  # per piece: logits (fp32, ln x V), token losses (ln,)
            for r, s, ln in pieces:
                ids = batch["input_ids"][r:r + 1, s:s + ln]
                pos = torch.arange(ln, device=cfg.device)[None]
                with autocast(cfg, dt):
                    lg = model(ids, pos, None)[0].float()
                tl = F.cross_entropy(lg, tgt[r, s:s + ln], ignore_index=IGNORE, reduction="none")
                (tl.sum() / n_tgt).backward()
                ref.append((lg.detach(), tl.detach()))
            ref_grads = {k: p.grad.detach().float().clone() for k, p in model.named_parameters()}
            ref_sum = float(sum(float(tl.sum()) for _, tl in ref))
            del model
            for kind in kinds:
                row = {"variant": CHECK_NAMES[kind], "dtype": dt}
                if kind == "varlen" and dt == "fp32":
                    row.update(status="n/a", reason="varlen_attn (FA2) runs in bf16/fp16 only")
                    out["checks"].append(row)
                    continue
                grad = cfg.cuda or kind != "flex"
                try:
                    row.update(_compare(cfg, mc, state, kind, compiled, dt, grad, batch, tgt, n_tgt, pieces, ref,
                                        ref_grads, ref_sum, L))
                    tol = CORRECT_TOL[dt]
                    ok = row["logits_rel_err"] < tol["logits"] and (
                        row["grads_rel_err"] is None or row["grads_rel_err"] < tol["grads"])
                    if kind == "causal":
                        row["status"] = ("differs (as it must)" if row["logits_rel_err"] > 10 * tol["logits"]
                                         else "FAIL: the control matches")
                    else:
                        row["status"] = "pass" if ok else "FAIL"
                except BudgetExceeded:
                    raise
                except Exception as e:  # noqa: BLE001 - record and go on
                    row.update(status="error", error=f"{type(e).__name__}: {str(e)[:300]}")
                out["checks"].append(row)
                print(f"[correct] {row}", flush=True)
            del ref, ref_grads
            _cleanup(cfg)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    out["status"] = "ok"
    out["all_pass"] = all(
        c["status"].startswith("differs") if c["variant"].startswith("C") else c["status"] in ("pass", "n/a")
        for c in out["checks"])
    return out


def _compare(cfg, mc, state, kind, compiled, dt, grad, batch, tgt, n_tgt, pieces, ref, ref_grads, ref_sum, L):
    """One packed forward (+ backward) against the per-piece reference; returns the error figures."""
    model, _ = fresh_model(cfg, mc, state, kind, compiled and kind == "flex")
    pos = batch["position_ids"]
    if kind == "causal":  # the control: no mask, positions over the whole row
        pos = torch.arange(L, device=cfg.device).expand_as(pos)
    ctx = contextlib.nullcontext() if grad else torch.no_grad()
    with ctx:
        mask = make_mask(kind, batch, cfg.cuda)
        with autocast(cfg, dt):
            logits = model(batch["input_ids"], pos, mask)
        tl = F.cross_entropy(logits.reshape(-1, mc.vocab).float(), tgt.reshape(-1), ignore_index=IGNORE,
                             reduction="none").view(tgt.shape)
    num = den = 0.0
    worst_tok = 0.0
    for (r, s, ln), (rl, rt) in zip(pieces, ref):
        d = logits[r, s:s + ln].float() - rl
        num += float((d * d).sum())
        den += float((rl * rl).sum())
        worst_tok = max(worst_tok, float((tl[r, s:s + ln] - rt).abs().max()))
    res = {"logits_rel_err": math.sqrt(num / den), "max_token_loss_diff": worst_tok,
           "mean_loss_diff": abs(float(tl.sum()) - ref_sum) / n_tgt}
    if grad:
        (tl.sum() / n_tgt).backward()
        gnum = gden = worst = 0.0
        for k, p in model.named_parameters():
            g, gr = p.grad.detach().float(), ref_grads[k]
            e, nr = float((g - gr).norm()), float(gr.norm())
            gnum, gden = gnum + e * e, gden + nr * nr
            if nr > 0:
                worst = max(worst, e / nr)
        res.update(grads_rel_err=math.sqrt(gnum / gden), grads_worst_param_rel_err=worst)
    else:
        res.update(grads_rel_err=None, grads_note="flex has no backward on CPU: logits only")
    del model, logits, tl
    return res


# ---------------------------------------------------------------------------
# Plans


def plan(cfg: Cfg) -> list[dict]:
    s, l = cfg.seqs

    def tr(corpus_, seq, var, mode="eager"):
        return {"task": "train", "corpus": corpus_, "seq": seq, "var": var, "mode": mode}

    part1 = (
        [{"task": "correct", "corpus": "web", "seq": s, "mode": "eager"}]
        + [tr("web", s, v) for v in ("A", "A2", "C", "D", "E", "F")]
        + [tr("real", s, v) for v in ("A", "A2", "C", "D", "E", "F")]
        + [{"task": "loader", "corpus": "web", "seq": s, "mode": "eager"}]
        + [tr("web", s, "C0")]
        + [tr("web", l, v) for v in ("A", "A2", "C", "D", "E")]  # last: skipped first if time runs short
    )
    part2 = (
        [tr("web", s, v, "compiled") for v in ("A", "C", "D")]
        + [{"task": "correct", "corpus": "web", "seq": s, "mode": "compiled"}]  # reuses D's graph
        + [tr("web", s, "E", "compiled")]
        + [{"task": "loader", "corpus": "web", "seq": s, "mode": "compiled"}]
        + [tr("real", l, v) for v in ("A", "A2", "C", "D", "E")]
        + [tr("real", l, v, "compiled") for v in ("A", "C", "D", "E")]
    )
    tasks = {"part1": part1, "part2": part2, "all": part1 + part2}[cfg.plan]
    if cfg.only:
        tasks = [t for t in tasks if any(o in label(t) for o in cfg.only)]
    return tasks


def estimate_s(run: Run, t: dict) -> float:
    """Rough seconds a task takes on the H200 (CPU: small), to skip what cannot finish."""
    cfg = run.cfg
    if not cfg.cuda:
        return 2.0
    long_ = t["seq"] == cfg.seqs[1]
    compiled = t["mode"] == "compiled"
    step = (0.30 if long_ else 0.21) * (0.87 if compiled else 1.0)
    prep = 0.0
    if (t["corpus"], t["seq"]) not in run.corpora:
        prep = 45.0 if t["corpus"] == "real" else 10.0
    if t["task"] == "correct":
        return prep + (30.0 if ("flex", t["seq"]) in run.compiled_keys else 90.0) if compiled else prep + 60.0
    kind = "flex" if t["task"] == "loader" else ATTN[t["var"]]
    comp = 0.0
    if compiled and (kind, t["seq"]) not in run.compiled_keys:
        comp = 70.0
    elif not compiled and kind == "flex" and ("eager-flex", t["seq"]) not in run.compiled_keys:
        comp = 35.0
    if t["task"] == "loader":
        n = (cfg.cwarmup if compiled else cfg.warmup) + 4 * cfg.loader_steps
        return prep + comp + n * step + 15.0
    n = (cfg.cwarmup if compiled else cfg.warmup) + cfg.steps
    return prep + comp + n * step + 6.0


def label(t: dict) -> str:
    if t["task"] == "train":
        return f"{t['corpus']} {t['mode']} {t['seq']} {t['var']}"
    return f"{t['task']} {t['corpus']} {t['mode']} {t['seq']}"


def run_tasks(run: Run) -> None:
    cfg = run.cfg
    tasks = plan(cfg)
    fired = False
    for i, t in enumerate(tasks):
        rec = dict(t)
        left, need = run.left(), estimate_s(run, t)
        if t["mode"] == "compiled" and cfg.no_compile:
            rec.update(status="skipped", reason="--no-compile")
        elif fired or left - 10 < need:
            rec.update(status="skipped", reason=f"budget: {max(left, 0):.0f} s left, task needs ~{need:.0f} s")
        else:
            a = time.perf_counter()
            try:
                fn = {"train": task_train, "loader": task_loader, "correct": task_correct}[t["task"]]
                rec.update(fn(run, t))
                if t["task"] != "correct" and ATTN.get(t.get("var"), "flex") == "flex" and t["mode"] == "eager":
                    run.compiled_keys.add(("eager-flex", t["seq"]))
            except BudgetExceeded:
                fired = True
                rec.update(status="skipped", reason="budget ran out during the task")
            except Exception as e:  # noqa: BLE001 - one failing variant must not end the run
                rec.update(status="error", error=f"{type(e).__name__}: {str(e)[:500]}",
                           traceback=traceback.format_exc()[-2000:])
            rec["task_s"] = round(time.perf_counter() - a, 1)
            _cleanup(cfg)
        run.results.append(rec)
        print(f"[{i + 1}/{len(tasks)} {time.perf_counter() - run.t0:5.0f}s] {one_line(rec)}", flush=True)
        write_outputs(run)


def one_line(r: dict) -> str:
    head = label(r)
    if r.get("status") != "ok":
        return f"{head}: {r.get('status')} ({r.get('reason') or r.get('error')})"
    if r["task"] == "train":
        return (f"{head}: {r['useful_tok_s'] / 1e3:,.0f} useful ktok/s, pad {r['pad_pct']:.1f}%, MFU {r['mfu_pct']:.1f}%, "
                f"{r['step_ms_median']:.0f} ms/step, peak {r['peak_gib']} GiB, warm-up {r['warmup_s']} s, "
                f"loss {r['loss_first']}->{r['loss_last']}")
    if r["task"] == "loader":
        return (f"{head}: loader/resident {r['loader_over_resident']:.3f} (phases {r['per_phase_ratio']}), "
                f"loader alone {r['loader_alone_batches_s']} batches/s vs {r['gpu_steps_s']} steps/s, "
                f"main-thread wait {r['main_thread']['wait_ms']} ms")
    return f"{head}: all_pass={r['all_pass']}"


# ---------------------------------------------------------------------------
# Reporting


def table_rows(run: Run) -> list[dict]:
    rows = []
    for r in run.results:
        if r["task"] == "train" and r.get("status") == "ok":
            rows.append({**{k: r[k] for k in ("corpus", "mode", "seq", "var")}, **r})
        if r["task"] == "loader" and r.get("status") == "ok":
            for name in ("loader", "resident"):
                p = r["phases"][name]
                rows.append({"corpus": r["corpus"], "mode": r["mode"], "seq": r["seq"], "var": f"D {name}",
                             **p, "peak_gib": r["peak_gib"]})
    for row in rows:
        grp = [x for x in rows if (x["corpus"], x["mode"], x["seq"]) == (row["corpus"], row["mode"], row["seq"])]
        for base in ("A", "A2", "C"):
            ref = next((x for x in grp if x["var"] == base), None)
            row[f"x_{base}"] = row["useful_tok_s"] / ref["useful_tok_s"] if ref else None
    return rows


def markdown(run: Run) -> str:
    env = run.env
    lines = [f"torch {env.get('torch')}, {env.get('gpu')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, "
             f"triton {env.get('triton')}, python {env.get('python')}; plan {run.cfg.plan}; "
             f"{run.cfg.slots} slots/step, {run.cfg.steps} timed steps after {run.cfg.warmup} (eager) / "
             f"{run.cfg.cwarmup} (compiled) warm-up; model {run.mc}",
             "",
             "| corpus | mode | seq | var | useful ktok/s | slots ktok/s | pad % | peak GiB | MFU % | MFU spec % | "
             "step ms | x A | x A2 | x C |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(x, p=2):
        return "-" if x is None else f"{x:.{p}f}"

    for r in table_rows(run):
        lines.append(
            f"| {r['corpus']} | {r['mode']} | {r['seq']} | {r['var']} | {r['useful_tok_s'] / 1e3:,.0f} | "
            f"{r['slots_tok_s'] / 1e3:,.0f} | {r['pad_pct']:.1f} | {f(r.get('peak_gib'), 1)} | {r['mfu_pct']:.1f} | "
            f"{r['mfu_spec_pct']:.1f} | {r['step_ms_median']:.0f} | {f(r['x_A'])} | {f(r['x_A2'])} | {f(r['x_C'])} |")
    for r in run.results:
        if r["task"] == "correct" and r.get("status") == "ok":
            lines += ["", f"Correctness ({r['mode']}, rows {r['rows']} of web {r['seq']}, pieces {r['pieces_per_row']}):", "",
                      "| variant | dtype | logits rel err | max token-loss diff | grads rel err | worst param | status |",
                      "|---|---|---:|---:|---:|---:|---|"]
            for c in r["checks"]:
                def g(k):
                    v = c.get(k)
                    return "-" if v is None else f"{v:.2e}"

                lines.append(f"| {c['variant']} | {c['dtype']} | {g('logits_rel_err')} | {g('max_token_loss_diff')} | "
                             f"{g('grads_rel_err')} | {g('grads_worst_param_rel_err')} | {c['status']} |")
        if r["task"] == "loader" and r.get("status") == "ok":
            lines += ["", f"Loader ({r['mode']}, {r['corpus']} {r['seq']}, {r['attention']}, {r['workers']} workers, "
                      f"pin_memory {r['pin_memory']}): loader/resident = {r['loader_over_resident']:.3f} "
                      f"(phases {r['per_phase_ratio']}); loader alone {r['loader_alone_batches_s']} batches/s = "
                      f"{r['loader_headroom']}x the GPU's {r['gpu_steps_s']} steps/s; main thread blocked in next() "
                      f"{r['main_thread']['wait_ms']} ms per {run.cfg.loader_steps} steps; rows identical: {r['rows_identical']}"]
    lines += ["", "Targets:"] + [f"- {t}" for t in targets(run)]
    bad = [r for r in run.results if r.get("status") != "ok"]
    if bad:
        lines += ["", "Not run or failed:"] + [f"- {label(r)}: {r['status']}: {r.get('reason') or r.get('error')}" for r in bad]
    return "\n".join(lines) + "\n"


def targets(run: Run) -> list[str]:
    rows = table_rows(run)
    s = run.cfg.seqs[0]
    out = []

    def get(corpus_, mode, seq, var):
        return next((r for r in rows if (r["corpus"], r["mode"], r["seq"], r["var"]) == (corpus_, mode, seq, var)), None)

    for mode in ("eager", "compiled"):
        d = get("web", mode, s, "D")
        if d and d.get("x_A"):
            out.append(f"web {mode} {s}: D / A = {d['x_A']:.2f} (target >= 2.4): {'PASS' if d['x_A'] >= 2.4 else 'MISS'}")
        if d and d.get("x_C"):
            out.append(f"web {mode} {s}: D / C = {d['x_C']:.3f} (target >= 0.97): {'PASS' if d['x_C'] >= 0.97 else 'MISS'}")
    comp = [r for r in rows if r["mode"] == "compiled" and r["var"] == "D"]
    for r in comp:
        out.append(f"{r['corpus']} compiled {r['seq']} D: MFU {r['mfu_pct']:.1f}% of 790 TFLOP/s measured "
                   f"({r['mfu_spec_pct']:.1f}% of 989 spec) (target >= 40%): {'PASS' if r['mfu_pct'] >= 40 else 'MISS'}")
    for r in run.results:
        if r["task"] == "loader" and r.get("status") == "ok":
            x = r["loader_over_resident"]
            out.append(f"loader {r['mode']} {r['seq']}: loader-fed / GPU-resident = {x:.3f} (target >= 0.98): "
                       f"{'PASS' if x >= 0.98 else 'MISS'}")
        if r["task"] == "correct" and r.get("status") == "ok":
            out.append(f"correctness {r['mode']}: {'PASS' if r['all_pass'] else 'FAIL'}")
    return out or ["(nothing measured yet)"]


def write_outputs(run: Run) -> None:
    os.makedirs(run.cfg.out_dir, exist_ok=True)
    base = os.path.join(run.cfg.out_dir, f"gpu_train_{run.cfg.plan}")
    doc = {"env": run.env, "cfg": run.cfg.__dict__, "model": run.mc.__dict__ if run.mc else None,
           "n_params": n_params(run.mc) if run.mc else None, "prep": {f"{k[0]}-{k[1]}": c.prep for k, c in run.corpora.items()},
           "results": run.results, "wall_s": round(time.perf_counter() - run.t0, 1)}
    with open(base + ".json.tmp", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(base + ".json.tmp", base + ".json")
    with open(base + ".md", "w") as f:
        f.write(markdown(run))


def environment(cfg: Cfg) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": cfg.device,
           "cuda": torch.version.cuda, "numpy": np.__version__}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if cfg.cuda:
        env["gpu"] = torch.cuda.get_device_name()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        env["cudnn"] = torch.backends.cudnn.version()
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            env["nvidia_smi"] = q.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        env["gpu"], env["cudnn"] = "none (CPU)", None
    return env


def _dynamo_settings() -> None:
    import torch._dynamo.config as dc

    dc.automatic_dynamic_shapes = False  # every new shape gets its own static graph, as in the reference
    for k in ("recompile_limit", "cache_size_limit"):
        if hasattr(dc, k):
            setattr(dc, k, 64)
    for k in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dc, k):
            setattr(dc, k, 1024)


def main(argv=None) -> int:
    cfg = parse(argv)
    run = Run(cfg)
    run.env = environment(cfg)
    print(f"[env] {run.env}", flush=True)
    print(f"[cfg] {cfg}", flush=True)
    _dynamo_settings()
    torch.manual_seed(SEED)
    if cfg.tiny and not cfg.cuda:
        torch.set_num_threads(1)  # tiny matrices on shared cores: 2 threads ran 40x slower here

    def on_alarm(signum, frame):
        raise BudgetExceeded()

    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(max(1, int(cfg.budget_s - 5)))
    try:
        run_tasks(run)
    except BudgetExceeded:
        pass
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)
    write_outputs(run)
    print("\n" + markdown(run), flush=True)
    print(f"[done] {time.perf_counter() - run.t0:.0f} s; JSON and table in {cfg.out_dir}", flush=True)
    errors = sum(r.get("status") == "error" for r in run.results)
    return 1 if errors else 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)  # no waiting on compile workers or loader threads at exit
