"""What every worker process of every engine does once, before its first task.

A local pool worker and a Ray task's process run the same set-up
(``prepare_worker``): one core per worker, a bounded heap, and (for pool
workers) their signals and death with the parent (packer/procs.py). The pool's
tasks name the job they run under by key (``JOBS``), so the Job (megabytes: it holds the tokenizer JSON) crosses
into each worker once, and a task can never run under another build's job.
"""

from __future__ import annotations

import contextlib
import os

from ... import procs

MMAP_THRESHOLD = 4 << 20  # bytes: a larger block is its own mapping (bounded_malloc)

# Pool workers only: job key -> Job, filled by ``start_pool_worker`` (the pool's initializer).
JOBS: dict = {}


def bounded_malloc() -> None:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD`` (4 MB) in this process.

    By default glibc raises the threshold each time a large block is freed,
    so after a few units the 0.1-50 MB token buffers come from the heap,
    which fragments and keeps growing (we measured 250-300 MB in the main
    process against 60-90 MB with the threshold fixed). Fixed, every
    unit-sized buffer is its own mapping and goes back to the OS when freed,
    while a chunk's buffers (a few hundred KB) are reused from the heap: at
    128 KB they were mapped and unmapped for every chunk, and the page faults
    cost 16 workers 1.1 of their 1.6 system CPU seconds on the GPU host
    (docs/benchmarks.md). No-op where there is no glibc.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def prepare_worker() -> None:
    """One core per worker (the HF tokenizer must not fan a batch out over threads: set before
    its first use in this process) and a bounded heap. Idempotent."""
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    bounded_threads(1)
    bounded_malloc()


def bounded_threads(n: int) -> None:
    """At most ``n`` threads in pyarrow's CPU pool in this process: it is sized by the CPUs the process
    may run on, not by a cgroup's CPU quota, and whatever still calls into it (a compute kernel, a
    reader that asks for threads) must not start more threads than the build has CPUs. Only lowers."""
    import pyarrow as pa

    if pa.cpu_count() > n:
        pa.set_cpu_count(n)


def start_pool_worker(key: str, job) -> None:
    """A local pool worker's initializer: ``job`` under ``key``, the set-up above, a pool worker's signals
    (``procs.start_worker``: death with the parent, Ctrl-C left to the parent). (From a forkserver, the
    parent is the server, which exits when the build's process does.)"""
    procs.start_worker()
    prepare_worker()
    JOBS[key] = job


@contextlib.contextmanager
def one_core_tokenizer():
    """In-process builds: keep the HF tokenizer on this thread (one worker = one core)."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = old
