"""Every exact encoder per tokenizer family, side by side (issue 52); and auto against each one forced.

``--encode INPUTS``: per family (FAMILIES, where here) and engine (hf encode_batch_fast, tiktoken of packer's
conversion, fastokens encode_batch_flat, gigatoken encode_batch on strings, gigatoken files: encode_files reads
the JSON Lines itself) every document encoded once (after the first 5% warmed caches) in a child pinned to N
cores (each of --threads); only the encode timed; ids of every document compared with HF's (else no rate; BENCH_DUMP=DIR: every differing document written there).
``--builds FILE``: packer build of FILE with --tokenizer-backend auto and each exact engine forced, in a
rotating order, --rounds times: auto's wall and CPU over the fastest forced engine's; shards must be identical.
    python bench/encoders.py --encode bench_out/real/real.jsonl --threads 1 2
    python bench/encoders.py --builds bench_out/real.jsonl.zst --tokenizer ../shared/data/llama3 --rounds 5

Wheels for a host without internet: tokenizers tiktoken fastokens gigatoken==0.10.0 awkward awkward-cpp lazy-importer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile

from common import child_env, emit_json, measure, pin  # bench/common.py

HOME = os.environ.get("BENCH_TOKENIZERS") or os.path.expanduser("~/.cache/packer-test-tokenizers")  # BENCH_TOKENIZERS: all in one
SHARED = os.environ.get("BENCH_TOKENIZERS") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../shared/data")
FAMILIES = {"gpt2": os.path.join(SHARED, "gpt2-tokenizer.json"), "llama3": os.path.join(SHARED, "llama3"),
            "qwen3": os.path.join(HOME, "qwen3"), "deepseek-v3": os.path.join(HOME, "deepseek_v3"),
            "llama2": os.path.join(HOME, "llama2"), "gemma3": os.path.join(HOME, "gemma3"),
            "mistral-v3": os.path.join(SHARED, "mistral-v3")}
ENGINES = ("hf", "tiktoken", "fastokens", "gigatoken", "gigatoken files")

_ENCODE = r"""
import json, os, sys, time, numpy as np
from common import corpus_texts
from packer.tokenize import resolve_tokenizer
inputs, tok_path, engine, n, ref = sys.argv[1].split("\0"), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
info = resolve_tokenizer(tok_path)
texts = corpus_texts(inputs)
lists = lambda got: (np.fromiter((i for x in got for i in x), np.uint32), np.cumsum([0] + [len(x) for x in got]))
awk = lambda a: (np.asarray(a.layout.content.data, np.uint32), np.asarray(a.layout.offsets, np.int64))  # gigatoken's
if engine == "hf":
    from tokenizers import Tokenizer
    (hf := Tokenizer.from_str(info.json)).no_truncation(), hf.no_padding()
    run, flat = lambda: [e.ids for e in hf.encode_batch_fast(texts, add_special_tokens=False)], lists
elif engine == "tiktoken":
    import tiktoken; from packer.tokenize import backend as T; conv = T.convert(info.json)
    enc = tiktoken.Encoding("x", pat_str=conv.pat_str, mergeable_ranks=conv.ranks, special_tokens={})
    from packer.tokenize.backend.normalize import Normalizer  # HF's NFC/NFKC first, as packer's encoder (Qwen3)
    norm = Normalizer(conv.normalize) if conv.normalize is not None else None
    run, flat = lambda: enc.encode_ordinary_batch(list(map(norm, texts)) if norm else texts, num_threads=n), lists
elif engine == "fastokens":
    import fastokens; f = fastokens.Tokenizer.from_json_str(info.json)
    run = lambda: f.encode_batch_flat(texts, add_special_tokens=False)
    flat = lambda r: (np.frombuffer(r[0], np.uint32), np.frombuffer(r[1], np.uint64).astype(np.int64))
else:
    import gigatoken; tk, par, flat = gigatoken.Tokenizer.from_json(info.json), None if n > 1 else False, awk
    src = gigatoken.JsonlFileSource(inputs, "text")
    run = (lambda: tk.encode_batch(texts, parallel=par)) if engine == "gigatoken" else lambda: tk.encode_files(src, parallel=par)
every, texts = texts, texts[:len(texts) // 20]  # caches warmed on the first 5% of the documents
tk.encode_batch(texts, parallel=par) if engine == "gigatoken files" else run()
texts = every  # then all of them, once, timed
t0, c0 = time.perf_counter(), time.process_time()
got = run()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
ids, offs = flat(got)
if engine == "hf": np.save(ref + ".ids.npy", ids); np.save(ref + ".offs.npy", offs)
want, wo, diff = np.load(ref + ".ids.npy"), np.load(ref + ".offs.npy"), None
if len(offs) != len(wo) or not (np.array_equal(offs, wo) and np.array_equal(ids, want)):
    diff = next((i for i in range(min(len(offs), len(wo)) - 1)
                 if not np.array_equal(ids[offs[i]:offs[i + 1]], want[wo[i]:wo[i + 1]])), min(len(offs), len(wo)) - 1)
    if os.environ.get("BENCH_DUMP") and len(offs) == len(wo):  # every differing document, its text and both ids
        with open(os.path.join(os.environ["BENCH_DUMP"], f"diff-{os.path.basename(tok_path)}-{engine.replace(' ', '_')}.jsonl"), "w") as f:
            for i in range(len(wo) - 1):
                a, b = want[wo[i]:wo[i + 1]].tolist(), ids[offs[i]:offs[i + 1]].tolist()
                if a != b:
                    f.write(json.dumps({"doc": i, "text": texts[i], "hf": a, "engine": b}) + "\n")
    diff = f"doc {diff} of {len(wo) - 1} (docs {len(offs) - 1})"
print(json.dumps({"wall": wall, "cpu": cpu, "docs": len(texts), "chars": sum(map(len, texts)),
                  "tokens": int(wo[-1]), "diff": diff}))
"""


def encode(args) -> None:
    for fam, path in FAMILIES.items():
        if not os.path.exists(path) or args.family and fam not in args.family:
            continue  # (not here, or not asked for)
        with tempfile.TemporaryDirectory() as tmp:
            ref = os.path.join(tmp, "hf")
            for n in sorted(set(args.threads)):
                for engine in ENGINES:
                    cmd = pin(n) + [sys.executable, "-c", _ENCODE, "\0".join(args.inputs), path, engine, str(n), ref]
                    try:
                        r = measure(cmd, child_env(RAYON_NUM_THREADS=str(n), FASTOKENS_BPE_THREADS=str(n)))
                    except SystemExit as x:  # the engine cannot run this family: say why, go on
                        r = {"error": str(x).strip().splitlines()[-1][:200]}
                    row = {"family": fam, "engine": engine, "threads": n, "load": os.getloadavg()[0], **r}
                    if "tokens" in r:
                        row["Mtok_s"] = None if r["diff"] is not None else round(r["tokens"] / r["wall"] / 1e6, 2)
                    emit_json(row, args.json)


def _digest(out: str) -> str:
    d = os.path.join(out, "shards")
    return hashlib.sha256(b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)))).hexdigest()[:16]


def builds(args) -> None:
    engines = args.engines or ["auto", "fastokens", "tiktoken", "gigatoken"] + (["hf"] if args.with_hf else [])
    ratios, over_hf, cannot = [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            got = {}
            for eng in engines[rnd % len(engines):] + engines[:rnd % len(engines)]:
                if eng in cannot:
                    continue
                out = os.path.join(tmp, eng)
                try:
                    r = measure([sys.executable, "-m", "packer", "build", args.builds, out, "--seq-len", "2048",
                                 "--tokenizer", args.tokenizer, "--tokenizer-backend", eng, "--workers",
                                 str(args.workers), "--overwrite", "-q"], child_env())
                except SystemExit as x:  # this engine refuses this tokenizer (its one line says why): go on
                    cannot[eng] = str(x).strip().splitlines()[-1][:200]
                    continue
                tok = json.load(open(os.path.join(out, "manifest.json")))["tokenizer"]
                got[eng] = {"wall": round(r["wall"], 2), "cpu": round(r["cpu"], 2), "ran": tok["backend"],
                            "shards": _digest(out)}
            if len({g["shards"] for g in got.values()}) != 1:
                sys.exit(f"shards differ between engines: {got}")
            best = min((g for e, g in got.items() if e != "auto"), key=lambda g: g["wall"], default=got["auto"])
            ratios.append((got["auto"]["wall"] / best["wall"], got["auto"]["cpu"] / best["cpu"]))
            if "hf" in got:  # issue 52's target: auto >= 4x the HF backend
                over_hf.append((got["hf"]["wall"] / got["auto"]["wall"], got["hf"]["cpu"] / got["auto"]["cpu"]))
            emit_json({"round": rnd, "load": os.getloadavg()[0], "auto_over_fastest": [round(x, 3) for x in ratios[-1]],
                       **got, "cannot": cannot}, args.json)
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    print(f"auto / fastest forced, median of {len(ratios)} rounds: wall {med(ratios, 0):.3f}, CPU {med(ratios, 1):.3f}; "
          f"auto ran {got['auto']['ran']}" + (f"; auto is {med(over_hf, 0):.2f}x the HF backend's wall, "
                                               f"{med(over_hf, 1):.2f}x its CPU" if over_hf else ""))


def main() -> None:
    ap, cores = argparse.ArgumentParser(description=__doc__.splitlines()[0]), len(os.sched_getaffinity(0))
    for flag, kw in (("--encode", dict(nargs="+", dest="inputs", help="JSON Lines files (field text)")),
                     ("--threads", dict(type=int, nargs="+", default=[1, cores], help="thread counts (default: 1 and all)")), ("--family", dict(nargs="+", choices=sorted(FAMILIES))),
                     ("--builds", dict(metavar="FILE")), ("--tokenizer", dict(default=FAMILIES["llama3"])),
                     ("--workers", dict(type=int, default=cores)), ("--rounds", dict(type=int, default=3)),
                     ("--with-hf", dict(action="store_true", help="--builds: HF forced too")),
                     ("--engines", dict(nargs="+", help="--builds: these (auto first), not every engine")), ("--json", {})):
        ap.add_argument(flag, **kw)
    args = ap.parse_args()
    builds(args) if args.builds else None
    encode(args) if args.inputs else None


if __name__ == "__main__":
    main()
