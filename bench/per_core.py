"""Per core, side by side: a whole 1-worker packer build (process start to exit) against each encoder
alone on the same texts already in memory, every run pinned to one core, in one table.

    python bench/real_corpus.py bench_out/real --mb 60        # the real corpus (or pass your own files)
    python bench/per_core.py --tokenizer ../shared/data/gpt2-tokenizer.json --reps 3 [FILES...]

Rows: ``packer`` (auto: fastokens where exact), ``packer-tiktoken``, optionally ``packer-hf`` (--hf);
``tiktoken``, ``hf``, ``fastokens``, ``gigatoken``, ``splintr`` alone (those installed; the encode
alone, texts read before the clock starts); ``datatrove`` (JsonlReader + DocumentTokenizer, start to
exit) where importable (``--extra-path``: a ``pip install --target`` folder, after the venv's own).
Wall and CPU: the fastest of ``--reps`` (runs alternate); "vs tiktoken": its wall (CPU) over the
row's (> 1: faster; CPU is the steadier on a shared machine). Each packer build runs once untimed first.

``--workers N``: packer at N and N/2 workers (the scaling) and datatrove at N tasks, each pinned to as
many cores, on the texts cut into ``--files`` .jsonl.zst (``--plain``: .jsonl) files; ratios against packer at N:

    python bench/per_core.py --workers 16 --tokenizer .carry/gpt2-tokenizer.json --extra-path .carry/dt .carry/real.jsonl.zst
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

import common

# Each child prints {"wall", "cpu"} for the encode alone; TEXTS and TOK are set before the body runs.
ALONE = {
    "tiktoken": """
from packer.tokenize.backend import convert
import tiktoken
conv = convert(JS, check_merges=False)
enc = tiktoken.Encoding("x", pat_str=conv.pat_str, mergeable_ranks=conv.ranks, special_tokens={})
if conv.normalize:
    from packer.tokenize.backend import Normalizer
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
LocalPipelineExecutor(pipeline=[JsonlReader(folder, glob_pattern=names[0] if len(names) == 1 else GLOB),
                                DocumentTokenizer(OUT, tokenizer_name_or_path=PATH, eos_token="<|endoftext|>",
                                                  shuffle_documents=False)],
                      tasks=TASKS, workers=TASKS, logging_dir=OUT + "/logs").run()
"""


def split_inputs(inputs: list[str], folder: str, files: int, ext: str) -> str:
    """``folder`` holding the inputs' texts as ``files`` .jsonl or .jsonl.zst files (runs of consecutive documents)."""
    import zstandard

    texts, _ = common.corpus_texts(inputs), os.makedirs(folder)
    per = -(-len(texts) // files)
    for k in range(0, len(texts), per):
        with (zstandard.open if ext.endswith(".zst") else open)(os.path.join(folder, f"{k // per:03d}{ext}"), "wt",
                                                                 encoding="utf-8") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts[k:k + per])
    return folder


def importable(name: str, a, env: dict) -> bool:
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.extend({a.extra_path!r}); import {name}"],
                          env=env, capture_output=True).returncode == 0


def head_of(a, inputs: list[str], out: str = "", tasks: int = 1, glob: str | None = None) -> str:
    """The lines a ``python -c`` child starts with: its inputs, tokenizer, output and datatrove's tasks."""
    values = (a.extra_path, inputs, os.path.abspath(a.tokenizer), out, tasks, glob)
    return f"import os\nEXTRA, INPUTS, PATH, OUT, TASKS, GLOB = {values!r}\n"


def one_core_rows(a, inputs: list[str], env: dict, tmp: str) -> dict[str, list]:
    """A 1-worker packer build per backend, each encoder alone, datatrove at 1 task: all on one core."""
    pin, rows = common.pin(1, a.core), {}
    for name in ["packer", "packer-tiktoken"] + (["packer-hf"] if a.hf else []):
        backend = {"packer": "auto", "packer-tiktoken": "tiktoken", "packer-hf": "hf"}[name]
        rows[name] = pin + [sys.executable, "-m", "packer.cli", "build", *inputs, os.path.join(tmp, name),
                            "--workers", "1", "--tokenizer", a.tokenizer, "--tokenizer-backend", backend, "--overwrite"]
    for name, body in ALONE.items():
        if importable("tokenizers" if name == "hf" else name, a, env):
            rows[name] = pin + [sys.executable, "-c", head_of(a, inputs) + CHILD.format(body=body)]
        else:
            print(f"# {name}: not importable here, skipped")
    if importable("datatrove", a, env):
        rows["datatrove"] = pin + [sys.executable, "-c", head_of(a, inputs, os.path.join(tmp, "datatrove")) + DATATROVE]
    return rows


def scaling_rows(a, inputs: list[str], env: dict, tmp: str) -> dict[str, list]:
    """``--workers N``: packer at N and N/2 workers, datatrove at N tasks, each pinned to as many cores."""
    ext = ".jsonl" if a.plain else ".jsonl.zst"
    folder = split_inputs(inputs, os.path.join(tmp, "in"), a.files, ext)
    rows = {f"packer-{w}": common.pin(w, a.core) + [sys.executable, "-m", "packer.cli", "build", folder, os.path.join(
        tmp, f"packer-{w}"), "--workers", str(w), "--tokenizer", a.tokenizer, "--overwrite", "-q"]
        for w in (a.workers, a.workers // 2)}
    if importable("datatrove", a, env):
        files = sorted(os.path.join(folder, n) for n in os.listdir(folder))
        child = head_of(a, files, os.path.join(tmp, "datatrove"), a.workers, "*" + ext) + DATATROVE
        rows["datatrove"] = common.pin(a.workers, a.core) + [sys.executable, "-c", child]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help=f"input files (default {common.REAL})")
    ap.add_argument("--tokenizer", default=common.GPT2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--core", type=int, default=0, help="which of this process's cores to pin to (the first)")
    ap.add_argument("--hf", action="store_true", help="also a 1-worker build with --tokenizer-backend hf (slow)")
    ap.add_argument("--workers", type=int, help="N: packer at N and N/2 workers against datatrove at N tasks")
    ap.add_argument("--files", type=int, default=48, help="with --workers: the .jsonl.zst files the texts are cut into")
    ap.add_argument("--plain", action="store_true", help="with --workers: .jsonl files (auto's fastokens: >= 32 MB)")
    ap.add_argument("--extra-path", action="append", default=[], help="folder appended to the children's sys.path")
    ap.add_argument("--json", help="append the result as one JSON line here")
    a = ap.parse_args()
    inputs = [os.path.abspath(p) for p in (a.inputs or [common.need_real()])]
    env = common.child_env(PYTHONPATH=os.pathsep.join(p for p in (common.HERE, common.REPO, os.environ.get("PYTHONPATH")) if p), RAYON_NUM_THREADS="1",
                           TOKENIZERS_PARALLELISM="false")
    tmp = tempfile.mkdtemp(prefix="per_core-")
    rows = scaling_rows(a, inputs, env, tmp) if a.workers else one_core_rows(a, inputs, env, tmp)
    if "datatrove" not in rows:
        print("# datatrove: not importable here (pip install --target DIR datatrove; --extra-path DIR), skipped")
    for name, cmd in rows.items():
        if name.startswith("packer"):
            common.measure(cmd, env)  # untimed: the check's record in place
    best: dict[str, dict] = {}
    for _ in range(a.reps):
        for name, cmd in rows.items():  # alternating, so a change in the machine's load hits every row
            shutil.rmtree(os.path.join(tmp, "datatrove"), ignore_errors=True)
            r = common.measure(cmd, env)
            if name not in best or r["wall"] < best[name]["wall"]:
                best[name] = r
    for name in [n for n in best if n.startswith("packer")]:  # the encoder auto chose (fastokens: >= 32 MB on disk)
        with open(os.path.join(tmp, name, "manifest.json")) as f:
            m = json.load(f)
        best[name].update(backend=m["tokenizer"]["backend"], tokens=m["totals"]["tokens"])
    shutil.rmtree(tmp, ignore_errors=True)
    vs = f"packer-{a.workers}" if a.workers else "tiktoken"
    ref = best.get(vs)
    print(f"{'row':18s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MiB':>13s} {'peak PSS MiB':>13s} "
          f"{'wall vs ' + vs:>17s} {'CPU vs ' + vs:>16s}")
    for name, r in best.items():  # > 1: the row is faster than the reference
        w, c = (f"{ref[k] / r[k]:.2f}x" if ref else "-" for k in ("wall", "cpu"))
        print(f"{name + (' ' + r['backend'] if 'backend' in r else ''):18s} {r['wall']:8.2f} {r['cpu']:8.2f} {r['rss']:13d} {r['pss']:13d} {w:>17s} {c:>16s}")
    if a.workers:
        n, h = ref, best[f"packer-{a.workers // 2}"]
        print(f"packer-{a.workers}: {n['tokens'] / n['wall'] / 1e6:.1f} M tokens/s ({n['tokens']:,} tokens, {n['backend']}, "
              f"start to exit); packer {a.workers // 2} -> {a.workers} workers: {h['wall'] / n['wall']:.2f}x")
    if a.workers and "datatrove" in best:
        d = best["datatrove"]
        print(f"packer-{a.workers} against datatrove-{a.workers}: {d['wall'] / n['wall']:.2f}x faster (wall), "
              f"{d['cpu'] / n['cpu']:.2f}x less CPU, {d['pss'] / max(1, n['pss']):.1f}x less peak PSS")
    mb = sum(os.path.getsize(p) for p in inputs) / 1e6
    common.emit_json({"bench": "per_core", "tokenizer": a.tokenizer, "input_mb": round(mb, 1), "workers": a.workers,
                      "machine": platform.processor() or platform.machine(), "rows": best}, a.json)


if __name__ == "__main__":
    main()
