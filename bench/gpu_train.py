"""GPU training benchmark: useful tokens/s of packed rows (packer) against padded rows.

One script, one GPU, one or two runs of under 9 minutes each::

    python bench/gpu_train.py --plan part1 --budget-s 500     # eager, seq 2048, both corpora, correctness, loader
    python bench/gpu_train.py --plan part2 --budget-s 500     # compiled blocks (MFU), seq 8192, loader (compiled)
    python bench/gpu_train.py --device cpu --tiny --plan all  # CPU smoke run of every code path (tests use it)

The model is examples/train_gpt.py's GPT at GPT-2-small size (12 layers, d_model
768, 12 heads, vocab 50304), the same in every variant; fp32 master weights, bf16
autocast, fused AdamW, fp32 cross-entropy. Each step has ``--slots`` token slots
(65,536: 32 x 2048 or 8 x 8192). Corpora: ``real`` (``packer build`` of
``--real`` with ``--tokenizer``) and ``web`` (web-like lengths, random ids).

Variants (rows of ``--slots`` slots; "useful" = non-padding tokens):

- ``A``  one document per row, truncated at seq_len, padded; causal SDPA.
- ``A2`` documents cut into chunks of at most seq_len, one chunk per row, padded; causal SDPA.
- ``C``  packed rows, plain causal attention over the whole row, positions 0..L-1 (cuDNN SDPA off).
- ``C0`` C with SDPA's default backend (cuDNN).
- ``D``  packed rows, document mask through flex attention, ``packer.block_mask`` built every step.
- ``E``  packed rows through ``varlen_attn`` with packer's ``cu_seqlens`` / ``max_seqlen``.
- ``F``  packed rows, dense (B, 1, L, L) mask from ``packer.dense_mask`` through SDPA.

Tasks: train (one variant), loader (D fed by ``PackedLoader`` against the same rows
on the GPU), correct (packed rows under each mask against every document alone).
Modes: eager, and compiled (every block compiled). Output: one line per finished
task, a compact table last; JSON and Markdown in ``$OUT`` (default ``bench_out/gpu``),
rewritten after every task. A task that fails is recorded with its error; one that
would not fit in what is left of ``--budget-s`` is recorded as skipped.
Method and figures: docs/benchmarks.md, "GPU training".
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # run as a script it is there already; imported by the tests, not

from gpu.config import SEED, Cfg, parse  # noqa: E402
from gpu.data import packed_batches, padded_batches, read_documents, weblike_lengths, weblike_tokens, write_build  # noqa: E402
from gpu.plan import dynamo_settings, run_tasks  # noqa: E402
from gpu.report import environment, markdown, write_outputs  # noqa: E402
from gpu.tasks import BudgetExceeded, Run  # noqa: E402

# The data helpers, for tests/test_gpu_train_smoke.py.
__all__ = ["main", "packed_batches", "padded_batches", "read_documents", "weblike_lengths", "weblike_tokens", "write_build"]


def _alarm(cfg: Cfg, on: bool) -> None:
    """SIGALRM raises BudgetExceeded 5 s before --budget-s runs out (where there is SIGALRM)."""
    if not hasattr(signal, "SIGALRM"):
        return
    if on:
        def fire(signum, frame):
            raise BudgetExceeded()

        signal.signal(signal.SIGALRM, fire)
    signal.alarm(max(1, int(cfg.budget_s - 5)) if on else 0)


def main(argv=None) -> int:
    cfg = parse(argv, __doc__.split("\n\n")[0])
    run = Run(cfg)
    run.env = environment(cfg)
    print(f"[env] {run.env}", flush=True)
    print(f"[cfg] {cfg}", flush=True)
    dynamo_settings()
    torch.manual_seed(SEED)
    if cfg.tiny and not cfg.cuda:
        torch.set_num_threads(1)  # tiny matrices on shared cores: 2 threads ran 40x slower here
    _alarm(cfg, True)
    try:
        run_tasks(run)
    except BudgetExceeded:
        pass
    finally:
        _alarm(cfg, False)
    write_outputs(run)
    print("\n" + markdown(run), flush=True)
    print(f"[done] {time.perf_counter() - run.t0:.0f} s; JSON and table in {cfg.out_dir}", flush=True)
    errors = sum(r.get("status") == "error" for r in run.results)
    return 1 if errors else 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)  # no waiting on compile workers or loader threads at exit
