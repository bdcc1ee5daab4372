"""Per core, side by side: a whole 1-worker packer build (process start to exit) against each encoder
alone on the same texts already in memory, every run pinned to one core, in one table.

    python bench/real_corpus.py bench_out/real --mb 60        # the real corpus (or pass your own files)
    python bench/per_core.py --tokenizer ../shared/data/gpt2-tokenizer.json --reps 3 [FILES...]

Rows: ``packer`` (auto: fastokens where exact), ``packer-tiktoken`` (--tokenizer-backend tiktoken),
optionally ``packer-hf`` (--hf); then ``tiktoken``, ``hf``, ``fastokens``, ``gigatoken``, ``splintr``
alone (those installed; encode time only, the texts read before the clock starts); ``datatrove``
(its JsonlReader + DocumentTokenizer, 1 task, start to exit) where ``import datatrove`` works
(``--extra-path`` adds a folder such as a ``pip install --target`` of it, after the venv's own).
bpe-openai is absent: it loads only its own cl100k/o200k vocabularies. Wall and CPU are the
fastest of ``--reps`` (runs alternate), peak RSS from wait4; "vs tiktoken" is tiktoken-alone's
wall (and CPU) over the row's (> 1: faster; on a shared machine the CPU ratio is the steadier). Each packer build runs once untimed first (the check's record
in place, as on any machine after its first build).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import common

# Each child prints {"wall", "cpu"} for the encode alone; TEXTS and TOK are set before the body runs.
ALONE = {
    "tiktoken": """
from packer.tokenize.tiktoken_convert import convert
import tiktoken
conv = convert(JS, check_merges=False)
enc = tiktoken.Encoding("x", pat_str=conv.pat_str, mergeable_ranks=conv.ranks, special_tokens={})
if conv.normalize:
    from packer.tokenize.normalize import Normalizer
    norm = Normalizer(conv.normalize); TEXTS = [norm(t) for t in TEXTS]
run = lambda: enc.encode_ordinary_batch(TEXTS, num_threads=1)""",
    "hf": """
from tokenizers import Tokenizer
tok = Tokenizer.from_str(JS)
run = lambda: tok.encode_batch_fast(TEXTS, add_special_tokens=False)""",
    "fastokens": """
os.environ.setdefault("FASTOKENS_BPE_THREADS", "1")
import fastokens
tok = fastokens.Tokenizer.from_json_str(JS)
run = lambda: tok.encode_batch_flat(TEXTS, add_special_tokens=False)""",
    "gigatoken": """
import gigatoken
tok = gigatoken.Tokenizer.from_json(JS)
run = lambda: tok.encode_batch_list(TEXTS, parallel=False)""",
    "splintr": """
import splintr
tok = splintr.from_json(PATH)
run = lambda: [tok.encode_ordinary(t) for t in TEXTS]""",
}

CHILD = """
import json, os, sys, time
sys.path.extend(EXTRA)
from common import corpus_texts
from packer.tokenize import resolve_tokenizer
TEXTS = corpus_texts(INPUTS)
info = resolve_tokenizer(PATH); JS = info.json
{body}
c0, t0 = time.process_time(), time.perf_counter(); run()
print(json.dumps({{"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}))
"""

DATATROVE = """
import sys; sys.path.extend(EXTRA)
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
files = INPUTS
folder = os.path.dirname(os.path.abspath(files[0]))
names = [os.path.relpath(os.path.abspath(f), folder) for f in files]
LocalPipelineExecutor(pipeline=[JsonlReader(folder, glob_pattern=names[0] if len(names) == 1 else None),
                                DocumentTokenizer(OUT, tokenizer_name_or_path=PATH, eos_token="<|endoftext|>",
                                                  shuffle_documents=False)],
                      tasks=1, workers=1, logging_dir=OUT + "/logs").run()
"""


def measure(cmd: list[str], env: dict) -> dict:
    """{wall, cpu, rss}: wall from start to exit, CPU seconds and peak RSS (MiB) from wait4 (the child and
    the children it waited for); an encoder alone prints its own {wall, cpu} around the encode, which win."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if p.returncode:
            sys.exit(f"{' '.join(cmd[:8])} ... failed ({p.returncode}):\n{err.read()[-2000:]}")
        lines = out.read().strip().splitlines()
    r = {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss // 1024}
    if lines and lines[-1].startswith("{"):
        r.update(json.loads(lines[-1]))
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help=f"input files (default {common.REAL})")
    ap.add_argument("--tokenizer", default=common.GPT2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--core", type=int, default=0, help="which of this process's cores to pin to")
    ap.add_argument("--hf", action="store_true", help="also a 1-worker build with --tokenizer-backend hf (slow)")
    ap.add_argument("--extra-path", action="append", default=[], help="folder appended to the children's sys.path")
    ap.add_argument("--json", help="append the result as one JSON line here")
    a = ap.parse_args()
    inputs = [os.path.abspath(p) for p in (a.inputs or [common.need_real()])]
    pin = common.pin(1, a.core)
    env = common.child_env(PYTHONPATH=os.pathsep.join([common.HERE, common.REPO]), RAYON_NUM_THREADS="1",
                           TOKENIZERS_PARALLELISM="false")
    tmp = tempfile.mkdtemp(prefix="per_core-")
    head = f"EXTRA = {a.extra_path!r}\nINPUTS = {inputs!r}\nPATH = {os.path.abspath(a.tokenizer)!r}\nimport os\n"
    rows: dict[str, list] = {}
    for name in ["packer", "packer-tiktoken"] + (["packer-hf"] if a.hf else []):
        backend = {"packer": "auto", "packer-tiktoken": "tiktoken", "packer-hf": "hf"}[name]
        out = os.path.join(tmp, name)
        rows[name] = pin + [sys.executable, "-m", "packer.cli", "build", *inputs, out, "--workers", "1",
                            "--tokenizer", a.tokenizer, "--tokenizer-backend", backend, "--overwrite"]
    for name, body in ALONE.items():
        probe = f"import sys; sys.path.extend({a.extra_path!r}); import {'tokenizers' if name == 'hf' else name}"
        if subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0:
            rows[name] = pin + [sys.executable, "-c", head + CHILD.format(body=body)]
        else:
            print(f"# {name}: not importable here, skipped")
    probe = f"import sys; sys.path.extend({a.extra_path!r}); import datatrove"
    if subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0:
        out = os.path.join(tmp, "datatrove")
        rows["datatrove"] = pin + [sys.executable, "-c", head + f"OUT = {out!r}\n" + DATATROVE]
    else:
        print("# datatrove: not importable here (pip install --target DIR datatrove; --extra-path DIR), skipped")
    for name, cmd in rows.items():
        if name.startswith("packer"):
            measure(cmd, env)  # untimed: the check's record in place
    best: dict[str, dict] = {}
    for _ in range(a.reps):
        for name, cmd in rows.items():  # alternating, so a change in the machine's load hits every row
            if name == "datatrove":
                shutil.rmtree(os.path.join(tmp, "datatrove"), ignore_errors=True)
            r = measure(cmd, env)
            if name not in best or r["wall"] < best[name]["wall"]:
                best[name] = r
    shutil.rmtree(tmp, ignore_errors=True)
    tk = best.get("tiktoken")
    print(f"{'row':18s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MiB':>13s} {'wall vs tiktoken':>17s} {'CPU vs tiktoken':>16s}")
    for name, r in best.items():
        w, c = (f"{tk[k] / r[k]:.2f}x" if tk else "-" for k in ("wall", "cpu"))
        print(f"{name:18s} {r['wall']:8.2f} {r['cpu']:8.2f} {r['rss']:13d} {w:>17s} {c:>16s}")
    mb = sum(os.path.getsize(p) for p in inputs) / 1e6
    common.emit_json({"bench": "per_core", "tokenizer": a.tokenizer, "input_mb": round(mb, 1),
                      "machine": platform.processor() or platform.machine(), "rows": best}, a.json)


if __name__ == "__main__":
    main()
