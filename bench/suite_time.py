"""Where the test suite's time goes (issue 54): the README's test command, idle or beside busy processes.

Runs ``pytest -q -n auto --maxprocesses 4 --dist loadgroup`` (the README's command) in this tree with a JUnit
report, optionally with ``--busy N`` CPU-bound Python loops beside it, and prints pytest's wall time, the load
average sampled through the run, and the tests' seconds (setup + call + teardown, summed over xdist's
workers) per folder and per test. ``--report FILE`` reads an earlier JUnit file instead of running.

    python bench/suite_time.py                       # idle
    python bench/suite_time.py --busy 8              # beside 8 busy processes
    python bench/suite_time.py --report /tmp/dur.xml --top 40
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_PYTEST = ["-q", "-n", "auto", "--maxprocesses", "4", "--dist", "loadgroup"]


def _spin() -> None:  # one busy CPU: what another job on a shared machine does
    while True:
        pass


def run_suite(junit: str, busy: int, extra: list[str]) -> dict:
    """The README's pytest line with ``busy`` spinning processes beside it: wall seconds, load samples, rc."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
    for p in spinners:
        p.start()
    loads, done = [], threading.Event()

    def sample():
        while not done.wait(10):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    t0 = time.perf_counter()
    try:
        rc = subprocess.call([sys.executable, "-m", "pytest", *README_PYTEST, "-p", "no:cacheprovider",
                              f"--junitxml={junit}", *extra], cwd=REPO)
    finally:
        wall = time.perf_counter() - t0
        done.set()
        for p in spinners:
            p.kill()
    return {"wall": wall, "rc": rc, "loads": loads}


def read_report(junit: str) -> list[tuple[str, str, float, str]]:
    """(file, test name, seconds, outcome) of every test case in a JUnit report."""
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        outcome = "skipped" if case.find("skipped") is not None else (
            "failed" if case.find("failure") is not None or case.find("error") is not None else "passed")
        out.append((path, case.get("name", ""), float(case.get("time", 0)), outcome))
    return out


def folder_of(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else "tests (top level)"


def summarize(cases, top: int) -> None:
    total = sum(c[2] for c in cases)
    by_folder = collections.defaultdict(lambda: [0, 0.0])
    for path, _, sec, _ in cases:
        f = by_folder[folder_of(path)]
        f[0] += 1
        f[1] += sec
    print(f"\n{len(cases)} tests, {total:.0f} test-seconds in all (summed over workers)")
    print("| folder | tests | seconds | share |\n|---|---:|---:|---:|")
    for name, (n, sec) in sorted(by_folder.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {sec:.0f} | {sec / total:.1%} |")
    secs = sorted((c[2] for c in cases), reverse=True)
    for k in (10, 50, 100, 200):
        print(f"slowest {k}: {sum(secs[:k]):.0f} s ({sum(secs[:k]) / total:.0%})")
    print(f"\n| seconds | test |\n|---:|---|")
    for path, name, sec, _ in sorted(cases, key=lambda c: -c[2])[:top]:
        print(f"| {sec:.1f} | {path}.py::{name} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes beside the suite")
    ap.add_argument("--report", help="summarize this JUnit file (no run)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args()
    if args.report:
        return summarize(read_report(args.report), args.top)
    junit = os.path.join(tempfile.mkdtemp(prefix="suite-time-"), "junit.xml")
    r = run_suite(junit, args.busy, args.pytest_args)
    loads = r["loads"] or [os.getloadavg()[0]]
    summarize(read_report(junit), args.top)
    print(f"\npytest wall {r['wall']:.0f} s ({r['wall'] / 60:.1f} min), exit {r['rc']}, {args.busy} busy processes "
          f"beside it, {os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f} "
          f"(median {sorted(loads)[len(loads) // 2]:.1f})")
    sys.exit(r["rc"])


if __name__ == "__main__":
    main()
