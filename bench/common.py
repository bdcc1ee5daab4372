"""Helpers shared by the bench scripts (run as `python bench/NAME.py`, so this imports as `common`).

The ``python -c`` children that time a bare tokenizer import it too: ``child_env`` puts
this folder on their path.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GPT2 = os.path.join(REPO, "..", "shared", "data", "gpt2-tokenizer.json")  # the real GPT-2 tokenizer
REAL = os.path.join(REPO, "bench_out", "real", "real.jsonl")  # the real-text corpus, made by real_corpus.py
MAKE_REAL = "python bench/real_corpus.py bench_out/real --mb 60"


def need_real(path: str = REAL) -> str:
    """``path``, or exit saying how to make the real corpus when it is missing."""
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: run {MAKE_REAL}")
    return path


def emit_json(result: dict, path: str | None) -> None:
    """Print ``result`` as one JSON line, and append that line to ``path`` when given."""
    line = json.dumps(result)
    print(line)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def pin(n: int, first: int = 0) -> list[str]:
    """``taskset`` prefix for cores first..first+n-1 of those this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < first + n:
        sys.exit(f"asked for {first + n} cores, this process may use only {len(cores)}")
    return ["taskset", "-c", ",".join(str(c) for c in cores[first:first + n])]


def child_env(**extra: str) -> dict:
    """The environment for a ``python -c`` child that imports ``common``, plus ``extra``."""
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def corpus_texts(inputs: list[str]) -> list[str]:
    """Every text packer would tokenize from ``inputs``, in order, read as the build reads it."""
    from packer.formats import Skip, discover, plan_slices, read_slice

    texts = []
    for sl, _ in plan_slices(discover(inputs).files, 1 << 62):
        texts.extend(t.text for t in read_slice(sl) if not isinstance(t, Skip))
    return texts


def char_batches(texts: list[str], batch_chars: int) -> list[list[str]]:
    """``texts`` in order, cut into batches that close once they hold ``batch_chars`` characters."""
    batches, cur, n = [], [], 0
    for t in texts:
        cur.append(t)
        n += len(t)
        if n >= batch_chars:
            batches.append(cur)
            cur, n = [], 0
    if cur:
        batches.append(cur)
    return batches


def start_together(start_at: float) -> None:
    """Wait until ``start_at`` (time.monotonic()): forked processes given one start begin their work at once."""
    while time.monotonic() < start_at:
        time.sleep(0.001)


def spin(seconds: float, start_at: float = 0.0) -> tuple[float, float]:
    """About ``seconds`` of pure-Python integer work on a lone core (a few KB of memory, no memory traffic),
    from ``start_at``: its wall and CPU seconds. Slower on each of n busy cores than on one: the clock."""
    start_together(start_at)
    t0, c0 = time.monotonic(), time.process_time()
    x = 0
    for i in range(int(seconds * 2e7)):
        x ^= i * 2654435761 & 0xFFFF
    return time.monotonic() - t0, time.process_time() - c0
