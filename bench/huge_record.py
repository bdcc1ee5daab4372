"""Peak memory of a build over one huge jsonl line, per tokenizer backend (issue 53.3).

One line of ``--mb`` MB of English-like ASCII text with a newline every few words (``--non-ascii``: a few
accented, CJK and emoji words mixed in), built by ``packer build LINE OUT --seq-len 2048 -q`` with each
backend, and the same build of a one-line file. The figure: the process tree's peak RSS (summed over the
build's processes, sampled every 5 ms), less the one-line build's, over the line's size. Also the sha256
of the shards, to compare two checkouts' bytes. ``--packer DIR``: run that checkout's packer (before/after):

    python bench/huge_record.py --mb 50 --packer ../main
    python bench/huge_record.py --mb 50
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading

from common import GPT2, REPO

BACKENDS = {"bytes": [], "fastokens": ["--tokenizer", GPT2], "tiktoken": ["--tokenizer", GPT2, "--tokenizer-backend",
            "tiktoken"], "hf": ["--tokenizer", GPT2, "--tokenizer-backend", "hf"]}


def tree_rss(pid: int) -> int:
    todo, total = [pid], 0
    while todo:
        p = todo.pop()
        for t in glob.glob(f"/proc/{p}/task/*/children"):
            try:
                todo += [int(c) for c in open(t).read().split()]
            except OSError:
                pass
        try:
            total += int([x.split()[1] for x in open(f"/proc/{p}/status") if x.startswith("VmRSS:")][0]) << 10
        except (OSError, IndexError):
            pass
    return total


def build(src: str, out: str, flags: list[str], env: dict) -> tuple[int, str]:
    """(peak tree RSS in bytes, sha256 of the shards) of one build."""
    p = subprocess.Popen([sys.executable, "-m", "packer", "build", src, out, "--seq-len", "2048", "-q", *flags],
                         env=env, cwd=os.path.dirname(src))
    peak, done = [0], threading.Event()

    def sample():
        while not done.wait(0.005):
            peak[0] = max(peak[0], tree_rss(p.pid))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    if p.wait() != 0:
        sys.exit(f"packer build {src} {' '.join(flags)} failed")
    done.set()
    t.join()
    h = hashlib.sha256()
    for f in sorted(glob.glob(os.path.join(out, "shards", "*.arrow"))):
        h.update(open(f, "rb").read())
    return peak[0], h.hexdigest()[:12]


def make_line(path: str, mb: float, non_ascii: bool) -> int:
    rng = random.Random(0)
    words = "the of and to in a is that for it as was with be by on not this are or from at which".split()
    words += ["café", "naïve", "中文", "🙂"] if non_ascii else []
    out, size = [], 0
    while size < mb * 1e6:
        s = " ".join(rng.choice(words) for _ in range(rng.randint(5, 20))) + "s\n"
        out.append(s)
        size += len(s.encode())
    data = (json.dumps({"text": "".join(out)}, ensure_ascii=False) + "\n").encode()
    open(path, "wb").write(data)
    return len(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--packer", default=REPO, help="the checkout whose packer runs")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--non-ascii", action="store_true")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": os.path.abspath(a.packer)}
    with tempfile.TemporaryDirectory() as tmp:
        big, tiny = os.path.join(tmp, "big.jsonl"), os.path.join(tmp, "tiny.jsonl")
        size = make_line(big, a.mb, a.non_ascii)
        open(tiny, "w").write('{"text": "a few words"}\n')
        for name in a.backends.split(","):
            base, _ = build(tiny, os.path.join(tmp, name + "-tiny"), BACKENDS[name], env)
            peak, sha = build(big, os.path.join(tmp, name), BACKENDS[name], env)
            print(json.dumps({"backend": name, "line_mb": round(size / 1e6, 1), "tiny_mib": base >> 20,
                              "peak_mib": peak >> 20, "x_line": round((peak - base) / size, 2), "shards": sha}), flush=True)


if __name__ == "__main__":
    main()
