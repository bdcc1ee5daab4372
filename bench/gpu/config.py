"""What a run of bench/gpu_train.py does: its flags, the sizes of the full and the tiny run, the variants."""

from __future__ import annotations

import argparse
import os

import torch

IGNORE = -100
SEED = 0
GPT2_VOCAB = 50257  # ids 0..50256; 50256 is <|endoftext|>
PEAK_MEASURED = 790e12  # bf16 matmul on random data, measured on the H200 (the reference MFU)
PEAK_SPEC = 989e12  # H100/H200 SXM datasheet, dense bf16

# The attention of each variant: a kind of examples/train_gpt.py's Mask.
ATTN = {"A": "causal", "A2": "causal", "C": "causal", "C0": "causal", "D": "flex", "E": "varlen", "F": "dense"}


# Sizes: flag -> (the full run, the tiny CPU run, what it is).
SIZES = {
    "web_docs": (20000, 150, "documents in the web-like corpus"),
    "web_vocab": (GPT2_VOCAB, 512, "vocabulary of the web-like ids (GPT-2's)"),
    "slots": (65536, 512, "token slots per step"),
    "layers": (12, 2, "model layers"),
    "d_model": (768, 64, "model width"),
    "heads": (12, 2, "attention heads"),
    "steps": (20, 3, "timed steps per variant"),
    "warmup": (4, 1, "eager warm-up steps"),
    "cwarmup": (6, 1, "compiled warm-up steps"),
    "loader_steps": (24, 4, "steps per loader/resident phase"),
    "loader_workers": (4, 1, "DataLoader workers"),
}


class Cfg(argparse.Namespace):
    """What the run does: the flags of ``parse``, the sizes resolved (full or ``--tiny``)."""

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")


def _parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--plan", choices=("part1", "part2", "all"), default="part1")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="2 layers, d 64, seq 128/256, a few steps (CPU smoke run)")
    p.add_argument("--budget-s", type=float, default=500.0, help="wall seconds for the whole run, preparation included")
    p.add_argument("--out", dest="out_dir", metavar="OUT", default=os.environ.get("OUT") or os.path.join("bench_out", "gpu"),
                   help="where JSON/MD go ($OUT)")
    p.add_argument("--data-dir", default=os.path.join("bench_out", "gpu_data"), help="cache of prepared builds")
    p.add_argument("--real", default=None, help="real-text corpus for packer build (default .carry/real.jsonl.zst)")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json for --real (default .carry/gpt2-tokenizer.json; tiny: bytes); 'bytes' = built-in")
    p.add_argument("--real-mb", type=float, default=None, help="use only the first MB of --real (decompressed)")
    p.add_argument("--no-compile", action="store_true", help="skip the compiled-blocks tasks (CPU: inductor needs a C++ compiler and minutes)")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="run only the plan's tasks whose label holds TEXT (repeatable), e.g. 'compiled 8192'")
    p.add_argument("--seqs", default=None, help="short,long seq_len (default 2048,8192; tiny 128,256)")
    for k, (big, small, what) in SIZES.items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=None, help=f"{what} (default {big}; tiny {small})")
    p.add_argument("--build-workers", type=int, default=os.cpu_count() or 1)
    return p


def parse(argv=None, description: str = "") -> Cfg:
    p = _parser(description)
    c = p.parse_args(argv, namespace=Cfg())
    for k, (big, small, _) in SIZES.items():
        if getattr(c, k) is None:
            setattr(c, k, small if c.tiny else big)
    c.seqs = tuple(int(x) for x in c.seqs.split(",")) if c.seqs else ((128, 256) if c.tiny else (2048, 8192))
    if len(c.seqs) != 2:
        p.error("--seqs takes two values: short,long")
    c.real = c.real or ("sample_data/corpus.jsonl" if c.tiny else ".carry/real.jsonl.zst")
    if c.tokenizer is None:
        c.tokenizer = None if c.tiny else ".carry/gpt2-tokenizer.json"
    if c.tokenizer in ("", "bytes", "none"):
        c.tokenizer = None
    c.only, c.build_workers, c.lr = tuple(c.only), max(1, c.build_workers), 3e-4
    return c
