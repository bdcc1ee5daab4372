"""A first build against the next one, per model folder, for this tree and a base commit side by side.

Each round, for each tree (``--base REF``, exported with ``git archive``, then this one) and folder:
``packer build INPUT`` as a new process with PACKER_CACHE empty (cold: nothing on record), then again
with the cache that build filled (warm). Prints the fastest of ``--rounds`` per cell (wall, and CPU seconds
of the build with its children: on a shared machine the wall moves with other jobs), cold/warm for
each tree, and this tree's cold time over the base's (issue 39.3: a first build <= 1.5x the warm one).

    python bench/real_corpus.py /tmp/real20 --mb 20
    python bench/first_build.py /tmp/real20/real.jsonl --base f8e3819 --rounds 2 \\
        ~/.cache/packer-test-tokenizers/qwen3 ~/.cache/packer-test-tokenizers/llama2 ...
"""

from __future__ import annotations

import argparse
import os
import resource
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


def one(tree: str, src: str, folder: str, work: str, workers: int, extra: tuple = ()) -> tuple[float, float, float, float]:
    """(cold, warm) wall seconds, then (cold, warm) CPU seconds (user + system, the build's process and
    its children: workers, transformers' view) of whole ``packer build`` processes of ``tree``."""
    cache = tempfile.mkdtemp(dir=work)
    times, cpus = [], []
    for _ in ("cold", "warm"):
        out = tempfile.mkdtemp(dir=work)
        cmd = [sys.executable, "-c", "from packer.cli import main; main()", "build", src, out, "--tokenizer", folder,
               "--workers", str(workers), "--quiet", "--overwrite", *extra]
        t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)  # waited-for descendants
        subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=tree, PACKER_CACHE=cache), check=True, cwd=work)
        times.append(time.perf_counter() - t0)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        shutil.rmtree(out)
    shutil.rmtree(cache)
    return times[0], times[1], cpus[0], cpus[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--base", required=True, metavar="REF")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hf", action="store_true", help="also this tree with --tokenizer-backend hf (issue 39.3: cold <= 1.0x its)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        trees = {a.base: export(a.base, work), "this tree": REPO}
        best: dict = {}
        for _ in range(a.rounds):
            for folder in a.folders:
                for name, tree, extra in [(n, t, ()) for n, t in trees.items()] + \
                        ([("hf", REPO, ("--tokenizer-backend", "hf"))] if a.hf else []):
                    got = one(tree, a.input, folder, work, a.workers, extra)
                    old = best.get((folder, name), (float("inf"),) * 4)
                    best[(folder, name)] = tuple(min(o, g) for o, g in zip(old, got))
    print(f"| folder | {a.base} cold / warm s | cold/warm | this tree cold / warm s | cold/warm | cold: this / base "
          f"| CPU s {a.base} cold / warm | CPU s this tree cold / warm |")
    print("|---|---|---|---|---|---|---|---|")
    for folder in a.folders:
        (bc, bw, bcc, bwc), (nc, nw, ncc, nwc) = best[(folder, a.base)], best[(folder, "this tree")]
        print(f"| {os.path.basename(folder.rstrip('/'))} | {bc:.2f} / {bw:.2f} | {bc / bw:.2f}x | {nc:.2f} / {nw:.2f} | "
              f"{nc / nw:.2f}x | {nc / bc:.2f} | {bcc:.2f} / {bwc:.2f} | {ncc:.2f} / {nwc:.2f} |", flush=True)
    if a.hf:
        print("\n| folder | this tree, hf cold / warm s | auto cold / hf cold (wall) | CPU s hf cold / warm | auto cold / hf cold (CPU) |")
        print("|---|---|---|---|---|")
        for folder in a.folders:
            hc, hw, hcc, hwc = best[(folder, "hf")]
            nc, ncc = best[(folder, "this tree")][0], best[(folder, "this tree")][2]
            print(f"| {os.path.basename(folder.rstrip('/'))} | {hc:.2f} / {hw:.2f} | {nc / hc:.2f}x | {hcc:.2f} / {hwc:.2f} | "
                  f"{ncc / hcc:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
