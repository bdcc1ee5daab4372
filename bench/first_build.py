"""A first build against the next one, per model folder, for this tree and a base commit side by side.

Each round, for each tree (``--base REF``, exported with ``git archive``, then this one) and folder:
``packer build INPUT`` as a new process with PACKER_CACHE empty (cold: nothing on record), then again
with the cache that build filled (warm). Prints the fastest of ``--rounds`` per cell, cold/warm for
each tree, and this tree's cold time over the base's (issue 39.3: a first build <= 1.5x the warm one).

    python bench/real_corpus.py /tmp/real20 --mb 20
    python bench/first_build.py /tmp/real20/real.jsonl --base f8e3819 --rounds 2 \\
        ~/.cache/packer-test-tokenizers/qwen3 ~/.cache/packer-test-tokenizers/llama2 ...
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export(ref: str, into: str) -> str:
    """The tree of git ``ref`` in a new folder under ``into``."""
    tree = os.path.join(into, "base")
    os.makedirs(tree)
    archive = subprocess.run(["git", "-C", REPO, "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    return tree


def one(tree: str, src: str, folder: str, work: str, workers: int) -> tuple[float, float]:
    """(cold, warm) wall seconds of whole ``packer build`` processes of ``tree``."""
    cache = tempfile.mkdtemp(dir=work)
    times = []
    for _ in ("cold", "warm"):
        out = tempfile.mkdtemp(dir=work)
        cmd = [sys.executable, "-c", "from packer.cli import main; main()", "build", src, out, "--tokenizer", folder,
               "--workers", str(workers), "--quiet", "--overwrite"]
        t0 = time.perf_counter()
        subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=tree, PACKER_CACHE=cache), check=True, cwd=work)
        times.append(time.perf_counter() - t0)
        shutil.rmtree(out)
    shutil.rmtree(cache)
    return times[0], times[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--base", required=True, metavar="REF")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        trees = {a.base: export(a.base, work), "this tree": REPO}
        best: dict = {}
        for _ in range(a.rounds):
            for folder in a.folders:
                for name, tree in trees.items():
                    got = one(tree, a.input, folder, work, a.workers)
                    old = best.get((folder, name), (float("inf"), float("inf")))
                    best[(folder, name)] = (min(old[0], got[0]), min(old[1], got[1]))
    print(f"| folder | {a.base} cold / warm s | cold/warm | this tree cold / warm s | cold/warm | cold: this / base |")
    print("|---|---|---|---|---|---|")
    for folder in a.folders:
        (bc, bw), (nc, nw) = best[(folder, a.base)], best[(folder, "this tree")]
        print(f"| {os.path.basename(folder.rstrip('/'))} | {bc:.2f} / {bw:.2f} | {bc / bw:.2f}x | {nc:.2f} / {nw:.2f} | "
              f"{nc / nw:.2f}x | {nc / bc:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
