"""What a `packer build` costs before any text is encoded, at this checkout and at --base.

    python bench/start_cost.py --base 8c38abd [--tokenizer ../shared/data/llama3 ...] [--rounds 15] [--input F]

Every build pays a serial start, whatever its size: Python, `import packer.cli`, resolving the
tokenizer (read back from its record after the first build), choosing the engine (the tiktoken
conversion, from its record) and starting the workers; then the manifest and the exit. On a
16-worker build of 320 MB that is a quarter of the wall time (docs/benchmarks.md). This script
times it as a user meets it: `python -m packer.cli build` of a 10-document file (or ``--input``), each
side with its own warm record folder (a first build fills it, untimed) and compiled bytecode (as an
installed packer has). The two sides alternate, who goes first too; it prints the medians and new/base.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from same_bytes import HERE, build, git, side_env

SHARED = os.path.join(HERE, "..", "shared", "data")


def run(checkout: str, work: str, tok: str, env: dict, inp: str = "tiny.jsonl", workers: list = ()) -> float:
    """Wall seconds of one build of ``inp`` in a new process (exits 1 with its error if it fails)."""
    shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
    err, wall, _ = build(checkout, work, [inp, "out", "--tokenizer", tok, *workers], env)
    if err:
        sys.exit(f"{checkout}: build failed: {err}")
    return wall


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git ref of the version to compare with")
    ap.add_argument("--tokenizer", nargs="+", help="tokenizer files or folders (default: llama3 and the GPT-2 "
                    "file in ../shared/data, where present)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--input", default="tiny.jsonl", help="the file built (default: 10 short documents)")
    ap.add_argument("--workers", type=int, help="--workers of the builds (default: packer's, one per core)")
    args = ap.parse_args(argv)
    toks = args.tokenizer or [p for p in (os.path.join(SHARED, "llama3"), os.path.join(SHARED, "gpt2-tokenizer.json"))
                              if os.path.exists(p)]
    if not toks:
        sys.exit("no tokenizer: pass --tokenizer (../shared/data is not beside this checkout)")
    tmp = tempfile.mkdtemp(prefix="start_cost_")
    base = os.path.join(tmp, "base")
    try:
        git("worktree", "add", "--detach", base, args.base)
        sides = {"base": base, "new": HERE}
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        with open(os.path.join(work, "tiny.jsonl"), "w") as f:
            for i in range(10):
                f.write(json.dumps({"text": f"Document {i}: a few words of plain text, and <|some|> markup."}) + "\n")
        print(f"base {args.base} = {git('rev-parse', '--short', args.base)}; new = this checkout (edits included); "
              f"{args.rounds} rounds, alternating", flush=True)
        for tok in toks:
            tok = os.path.abspath(tok)
            envs = {s: side_env(c, {"PYTHONPYCACHEPREFIX": os.path.join(tmp, f"pyc-{s}"), "PYTHONDONTWRITEBYTECODE": ""},
                                os.path.join(tmp, f"cache-{s}")) for s, c in sides.items()}
            inp = os.path.abspath(args.input) if args.input != "tiny.jsonl" else args.input
            w = ["--workers", str(args.workers)] if args.workers else []
            for s in sides:  # fill each side's records: the timed builds are the second and later ones
                run(sides[s], work, tok, envs[s], inp, w)
            walls: dict = {"base": [], "new": []}
            for r in range(args.rounds):
                for s in (("base", "new") if r % 2 == 0 else ("new", "base")):
                    walls[s].append(run(sides[s], work, tok, envs[s], inp, w))
            b, n = statistics.median(walls["base"]), statistics.median(walls["new"])
            print(f"{os.path.basename(tok):24} base {b:.3f} s  new {n:.3f} s  new/base {n / b:.3f}  "
                  f"(min {min(walls['base']):.3f} / {min(walls['new']):.3f} s)", flush=True)
    finally:
        subprocess.run(["git", "-C", HERE, "worktree", "remove", "--force", base], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
