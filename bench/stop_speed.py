"""How long a build takes to stop on Ctrl-C or SIGTERM on a busy machine, and that --resume then finishes it
byte-identically (issue 55.5: within 3 s at load 16, every engine and backend).

A jsonl corpus from sample_data (``--mb``) is built once per backend (the reference); then ``--busy`` processes
spin beside the builds (not niced unless ``--nice``: the load of other builds and test suites), and each engine,
backend and signal: a build, stopped once ``--at`` units are written (SIGINT to its process group, as a
terminal's Ctrl-C; SIGTERM to the main process alone, as kill or docker stop), timed until its main process has
exited (main_s) and every process of its tree is gone (tree_s: workers, a local Ray's, its watchdog), then
resumed (with the busy processes paused) and compared with the reference. Beside each: os.getloadavg() and the
running processes (/proc/loadavg) at the signal.

    python bench/stop_speed.py --busy 13 --engines local,ray --backends hf,tiktoken,auto --signals INT,TERM
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA3 = os.path.join(REPO, "..", "shared", "data", "llama3")
SPIN = ("import ctypes,os,signal,sys\nctypes.CDLL('libc.so.6').prctl(1, signal.SIGKILL)\nos.nice(int(sys.argv[1]))\n"
        "while True: pass")  # a busy process: dies with the bench (PR_SET_PDEATHSIG), niced as asked


def make_corpus(path: str, mb: float) -> None:
    """About ``mb`` MB of jsonl: sample_data's readable records over and over, each numbered."""
    texts = []
    for line in open(os.path.join(REPO, "sample_data", "corpus.jsonl"), "rb"):
        with contextlib.suppress(UnicodeDecodeError, ValueError):
            rec = json.loads(line.decode())
            texts += [rec["text"]] if isinstance(rec, dict) and isinstance(rec.get("text"), str) else []
    with open(path, "w") as f:
        for k in itertools.takewhile(lambda k: f.tell() < mb * 1e6, itertools.count()):
            f.write(json.dumps({"text": f"[{k}] {texts[k % len(texts)]}"}) + "\n")


def proc(pid: int, what: str) -> str:
    with contextlib.suppress(OSError):
        return open(f"/proc/{pid}/{what}").read()
    return ""


alive = lambda pid: proc(pid, "stat").rsplit(")", 1)[-1].split()[:1] not in ([], ["Z"], ["X"])  # noqa: E731


def tree(pid: int) -> set[int]:
    """``pid`` and its live descendants (Linux /proc)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p not in out and alive(p):
            out.add(p)
            with contextlib.suppress(OSError):
                todo += [int(c) for t in os.listdir(f"/proc/{p}/task") for c in proc(p, f"task/{t}/children").split()]
    return out


def build_cmd(corpus: str, out: str, a, engine: str, backend: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "packer", "build", corpus, out, "--tokenizer", a.tokenizer, "--seq-len", "2048",
            "--unit-mb", str(a.unit_mb), "--workers", str(a.workers), "--engine", engine,
            "--tokenizer-backend", backend, "-q", *extra]


def files(folder: str) -> dict[str, bytes]:
    return {os.path.relpath(f"{top}/{n}", folder): open(f"{top}/{n}", "rb").read() for top, _, ns in os.walk(folder) for n in ns}


def stop_one(corpus: str, work: str, a, engine: str, backend: str, sig: str, busy: list, ref: dict) -> dict:
    """One build stopped by ``sig`` once ``a.at`` units are written, under the busy processes; then resumed."""
    out, procs = tempfile.mkdtemp(dir=work), set()
    [b.send_signal(signal.SIGCONT) for b in busy]
    p = subprocess.Popen(build_cmd(corpus, out, a, engine, backend, "--overwrite"), start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while p.poll() is None and len(os.listdir(os.path.join(out, "units")) if os.path.isdir(out + "/units") else ()) < a.at:
        time.sleep(0.02)
    procs, load, running, t0 = tree(p.pid), os.getloadavg()[0], open("/proc/loadavg").read().split()[3], time.monotonic()
    os.killpg(p.pid, signal.SIGINT) if sig == "INT" else p.send_signal(signal.SIGTERM)
    err, t_main = p.communicate()[1], time.monotonic() - t0
    names, last = {q: proc(q, "comm").strip() for q in procs}, ["main"]
    while any(alive(q) for q in procs):  # (Ray's processes are reparented as they go: followed by name)
        new = {c for q in procs if alive(q) for c in tree(q)} - procs
        names.update((c, proc(c, "comm").strip()) for c in new)
        procs, last = procs | new, [names[q] for q in procs if alive(q)]
        time.sleep(0.01)
    t_tree = time.monotonic() - t0
    [b.send_signal(signal.SIGSTOP) for b in busy]
    r = subprocess.run(build_cmd(corpus, out, a, engine, backend, "--resume"), capture_output=True, text=True)
    got = files(out)
    shutil.rmtree(out)
    return dict(engine=engine, backend=backend, signal=sig, exit=p.returncode, main_s=round(t_main, 2),
                tree_s=round(t_tree, 2), last=last[0], processes=len(procs), load1=round(load, 1), running=running,
                resume_exit=r.returncode, identical=r.returncode == 0 and got == ref,
                differ=sorted(k for k in set(got) | set(ref) if got.get(k) != ref.get(k))[:3],
                err=err.strip()[-200:] if p.returncode == 0 else "")  # (exit 0: it went on to the end)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default, what in [("--mb", 8.0, "corpus size"), ("--unit-mb", 1.0, ""), ("--workers", 2, ""),
                                ("--tokenizer", LLAMA3, ""), ("--busy", 13, "spinning processes beside the builds"),
                                ("--nice", 0, "their nice value (0: as busy as the build)"),
                                ("--at", 3, "units written when the signal is sent"), ("--engines", "local,ray", ""),
                                ("--backends", "hf,tiktoken,auto", ""), ("--signals", "INT,TERM", ""), ("--rounds", 1, "")]:
        ap.add_argument(flag, type=type(default), default=default, help=what or None)
    a = ap.parse_args(argv)
    # A build inherits an ignored SIGINT (this script started with & from a shell), and Python then leaves it
    # ignored: its Ctrl-C would measure nothing. Handled here, it is SIGINT's default in the builds.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (the finally below kills the busy processes)
    work, busy, refs = tempfile.mkdtemp(prefix="stop_speed-"), [], {}
    try:
        corpus = os.path.join(work, "c.jsonl")
        make_corpus(corpus, a.mb)
        for backend in a.backends.split(","):
            subprocess.run(build_cmd(corpus, os.path.join(work, backend), a, "local", backend), check=True)
            refs[backend] = files(os.path.join(work, backend))
        busy = [subprocess.Popen([sys.executable, "-c", SPIN, str(a.nice)]) for _ in range(a.busy)]
        time.sleep(5)  # (the load average climbs meanwhile; "running" is the instantaneous count)
        for engine, backend, sig, _ in itertools.product(*(x.split(",") for x in (a.engines, a.backends, a.signals)),
                                                         range(a.rounds)):
            print(json.dumps(stop_one(corpus, work, a, engine, backend, sig, busy, refs[backend])), flush=True)
    finally:
        [b.kill() for b in busy]
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
