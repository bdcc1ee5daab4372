"""Helpers shared by the bench scripts (run as `python bench/NAME.py`, so this imports as `common`).

The ``python -c`` children that time a bare tokenizer import it too: ``child_env`` puts
this folder on their path.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
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


def pss_mb(pid: int, cpu: dict | None = None) -> float:
    """PSS of ``pid`` and all its descendants, MiB; ``cpu`` (if given) gets each one's CPU seconds so far
    (a pool whose workers are never waited for leaves them out of wait4's count)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        if cpu is not None:
            try:
                f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
                cpu[p] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                pass
        for t in glob.glob(f"/proc/{p}/task/*/children"):
            try:
                todo += [int(c) for c in open(t).read().split()]
            except OSError:
                pass
        try:
            for line in open(f"/proc/{p}/smaps_rollup"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def measure(cmd: list[str], env: dict) -> dict:
    """{wall, cpu, rss, pss}: wall from start to exit, CPU seconds and peak RSS (MiB) from wait4 (the child and
    the children it waited for; or the CPU of its process tree sampled every 0.1 s, where more), peak PSS of
    that tree; an encoder alone prints its own {wall, cpu} around the encode, which win."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        peak, done, seen = [0.0], threading.Event(), {}

        def sample():
            while not done.wait(0.1):
                peak[0] = max(peak[0], pss_mb(p.pid, seen))

        threading.Thread(target=sample, daemon=True).start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if p.returncode:
            sys.exit(f"{' '.join(cmd[:8])} ... failed ({p.returncode}):\n{err.read()[-2000:]}")
        lines = out.read().strip().splitlines()
    cpu = max(ru.ru_utime + ru.ru_stime, sum(seen.values()))  # the second: to the last sample, children unwaited
    r = {"wall": wall, "cpu": cpu, "rss": ru.ru_maxrss // 1024, "pss": round(peak[0])}
    if lines and lines[-1].startswith("{"):
        r.update(json.loads(lines[-1]))
    return r
