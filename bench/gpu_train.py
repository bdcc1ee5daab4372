"""GPU training benchmark: useful tokens/s of packed rows (packer) against padded rows.

One GPU, one or two runs of under 9 minutes each::

    python bench/gpu_train.py --plan part1 --budget-s 500     # eager, seq 2048, both corpora, correctness, loader
    python bench/gpu_train.py --plan part2 --budget-s 500     # compiled blocks (MFU), seq 8192, loader (compiled)
    python bench/gpu_train.py --device cpu --tiny --plan all  # CPU smoke run of every code path (tests use it)

The model is examples/train_gpt.py's GPT at GPT-2-small size. Variants: A one document
per row, padded; A2 chunks of documents, one per row, padded; C packed, no mask (C0:
cuDNN SDPA); D packed + flex document mask; E packed + varlen_attn; F packed + dense
mask. Tasks: train, loader (D fed by PackedLoader), correct (every mask against every
document alone). JSON and Markdown go to ``$OUT`` (default bench_out/gpu) after every
task. The parts are in bench/gpu/; method and figures in docs/benchmarks.md, "GPU training".
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
