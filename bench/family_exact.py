"""Each model family's tokenizer: packer's ids against transformers' own, per document, on every engine.

For every tokenizer (the small families of bench/families.py, built now, and the real files in ../shared/data
where present) and every engine packer accepts for it (auto, hf, and tiktoken where auto chose it): (1) builds
the corpus with ``packer build`` (the API, one worker) and compares the shard checksums across engines (they
must be identical); (2) encodes every document with the Encoder a build worker runs, and compares its ids with
``transformers.AutoTokenizer`` (``PreTrainedTokenizerFast`` for a lone tokenizer.json): ``tokenizer(text)["input_ids"]``,
plus EOS unless the template already ends with it. One row per tokenizer; exits 1 on any difference.

    python bench/real_corpus.py bench_out/real --mb 60      # once: real text from this machine
    python bench/family_exact.py bench_out/real/real.jsonl  # or: sample_data
    python bench/family_exact.py bench_out/real/real.jsonl --fastokens  # fastokens on the real families (issue 40)
    python bench/family_exact.py bench_out/real/real.jsonl --builds 2  # whole builds auto vs hf, warm and cold

(``--normalize-cost``, what NFC costs the fast backend, is at commit 0a283c5: docs/benchmarks.md.)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families  # noqa: E402  bench/families.py
from common import corpus_texts  # noqa: E402  bench/common.py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(REPO, "..", "shared", "data")
REAL = {"gpt2 (real)": os.path.join(SHARED, "gpt2-tokenizer.json"), "llama3 (real)": os.path.join(SHARED, "llama3"),
        "mistral-v3 (real)": os.path.join(SHARED, "mistral-v3"), "minilm (real)": os.path.join(SHARED, "minilm")}


def transformers_ids(path: str, texts: list[str], eos: int | None) -> list[list[int]]:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    hf = AutoTokenizer.from_pretrained(path) if os.path.isdir(path) else PreTrainedTokenizerFast(tokenizer_file=path)
    return [ids if eos is None or ids[-1:] == [eos] else ids + [eos] for ids in hf(texts, truncation=False)["input_ids"]]


def one(name: str, path: str, inputs: list[str], texts: list[str], work: str) -> dict:
    from packer import build
    from packer.tokenize import Encoder, choose_backend, resolve_tokenizer

    from packer.tokenize.backend import SAMPLE_DOCS

    ref = None
    row = {"tokenizer": name, "engines": [], "docs": len(texts)}
    sums = {}
    for engine in ("auto", "hf", "tiktoken"):
        info = resolve_tokenizer(path)
        try:
            info = choose_backend(info, engine, lambda: [t[:4096] for t in texts[:SAMPLE_DOCS]])
        except Exception as e:  # tiktoken refused: the one-line reason
            m = re.search(r"exactly \((?:BPE |model )?([^ ;(),]+)", str(e))  # "... exactly (BPE byte_fallback (...))"
            row["tiktoken"] = f"refused: {m.group(1) if m else str(e).split(';')[0][-60:]}"
            continue
        if engine == "auto":
            row["auto picks"] = info.backend
            row["added"] = info.added
            ref = transformers_ids(path, texts, info.eos_id)
            row["tokens"] = sum(map(len, ref))
        got = [a.tolist() for a in Encoder(info).encode_batch(texts)]
        bad = next((i for i, (g, r) in enumerate(zip(got, ref)) if g != r), None)
        row["engines"].append(f"{engine}={'ok' if bad is None else f'DIFF@doc{bad}'}")
        out = os.path.join(work, f"{name.replace(' ', '_')}-{engine}")
        m = build(inputs, out, seq_len=2048, tokenizer=path, workers=1, quiet=True, overwrite=True,
                  tokenizer_backend=engine).manifest
        sums[engine] = [s["xxh3_128"] for s in m["shards"]]
        row["dtype"] = m["dtype"]
    row["shards identical"] = len({tuple(v) for v in sums.values()}) == 1
    row["ok"] = all(e.endswith("=ok") for e in row["engines"]) and row["shards identical"]
    return row


CACHE = os.environ.get("PACKER_TEST_TOKENIZERS", os.path.expanduser("~/.cache/packer-test-tokenizers"))
FAMILIES = {"deepseek_v3": f"{CACHE}/deepseek_v3", "gemma3": f"{CACHE}/gemma3", "llama2": f"{CACHE}/llama2",
            "mistral-v3": REAL["mistral-v3 (real)"], "qwen3": f"{CACHE}/qwen3", "llama3": REAL["llama3 (real)"],
            "gpt2": REAL["gpt2 (real)"]}


def sweep() -> list[str]:
    """Every code point but surrogates, 64 a text (after a letter, doubled, after a digit, before a space),
    whitespace runs, digit runs of several scripts, emoji sequences, stacked combining marks."""
    cps = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    ws = [" ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\u200b"]
    return (["".join(f"{c}a{c}{c} 7{c}\u3000" for c in cps[i:i + 64]) for i in range(0, len(cps), 64)]
            + [a * n + "x" + b * m for a in ws for b in ws for n in (1, 2, 3, 17) for m in (1, 4)]
            + ["".join(chr(z + d) for d in range(10)) * 3 + " 1234567 12.5" for z in (0x30, 0x660, 0x966, 0xFF10, 0x1D7CE)]
            + ["👩‍👩‍👧‍👦 🇫🇷 👍🏽 ❤️‍🔥 é ệ ﷽ 가각 日本語の文章 ༀ ำ", "a\u0301\u0302\u0303 e\u0308\u0304 " * 30])


def fastokens_exact(texts: list[str]) -> None:
    """fastokens against HF tokenizers (the file, and transformers' rebuild of it where that differs) and
    AutoTokenizer (no special tokens added), one thread each: texts that differ, the first difference, and
    fastokens' CPU seconds / HF's ``encode_batch`` on the same texts in memory."""
    os.environ.update(FASTOKENS_BPE_THREADS="1", RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    import json

    import fastokens
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    print("| family | pre-tokenizer / normalizer | fastokens = HF: real docs, sweep, literals | = AutoTokenizer "
          "| fastokens CPU / HF | first difference |\n|---|---|---|---|---|---|")
    sw = sweep()
    for name, path in [(k, v) for k, v in FAMILIES.items() if os.path.exists(v)]:
        js = open(path if path.endswith(".json") else os.path.join(path, "tokenizer.json"), encoding="utf-8").read()
        lits = [t["content"] for t in json.loads(js)["added_tokens"]]
        lits += [f"x{t}y {t}{t} {t}" for t in lits]
        auto = AutoTokenizer.from_pretrained(path) if os.path.isdir(path) else None
        runs = [("", js, Tokenizer.from_str(js))]
        if auto is not None and auto.backend_tokenizer.to_str() != runs[0][2].to_str():
            runs.append((" (transformers rebuild)", auto.backend_tokenizer.to_str(), auto.backend_tokenizer))
        a_ids = auto(texts, add_special_tokens=False)["input_ids"] if auto is not None else None
        for label, tj, hf in runs:
            d = json.loads(tj)
            row = f"| {name}{label} | {(d['pre_tokenizer'] or {}).get('type')} / {(d['normalizer'] or {}).get('type')} | "
            try:
                ft = fastokens.Tokenizer.from_json_str(tj)
            except ValueError as e:
                print(f"{row}refused: {e} | - | - | - |", flush=True)
                continue
            cells, first = [], ""
            for part in (texts, sw, lits):
                t0 = time.process_time()
                ref = hf.encode_batch(part, add_special_tokens=False)
                t1 = time.process_time()
                out = ft.encode_batch(part, add_special_tokens=False)
                t2, got = time.process_time(), [list(g.ids) for g in out]
                bad = [i for i, (g, r) in enumerate(zip(got, ref)) if g != r.ids]
                cells.append(f"{len(bad)}/{len(part)}")
                if bad and not first:
                    i, r = bad[0], ref[bad[0]]
                    k = next((j for j, (x, y) in enumerate(zip(got[i], r.ids)) if x != y), min(len(got[i]), len(r.ids)))
                    at = r.offsets[min(k, len(r.offsets) - 1)][0]
                    first = f"{part[i][max(0, at - 8):at + 8]!r}: HF {r.ids[k:k + 3]}, fastokens {got[i][k:k + 3]}"
                if part is texts:
                    speed, ft_ids = (t2 - t1) / (t1 - t0), got
            vs_auto = "-" if a_ids is None else f"{sum(g != a for g, a in zip(ft_ids, a_ids))}/{len(texts)}"
            print(f"{row}{', '.join(cells)} | {vs_auto} | {speed:.2f} | {first or '-'} |", flush=True)


def builds(src: str, workers: int, only: str | None) -> None:
    """Whole builds of ``src`` per real family: auto against hf, warm (checks on record) and cold (PACKER_CACHE
    empty), wall seconds of ``packer build`` as a new process, side by side; shards compared."""
    import filecmp
    import shutil
    import subprocess

    env0 = dict(os.environ, PYTHONPATH=REPO)
    real = {k.split(" ")[0]: v for k, v in REAL.items()} | {k: os.path.join(CACHE, k) for k in ("qwen3", "gemma3", "llama2", "deepseek_v3")}
    print("| family | auto picks | hf cold | auto cold | hf warm | auto warm | speed-up cold (hf/auto) | speed-up warm | shards |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, path in real.items():
        if not os.path.exists(path) or (only and name not in only.split(",")) or name == "minilm":
            continue
        with tempfile.TemporaryDirectory() as work:
            t, picks = {}, "?"
            for run in ("hf cold", "auto cold", "hf warm", "auto warm"):
                backend, state = run.split()
                cache = os.path.join(work, f"cache-{run.replace(' ', '-')}")
                if state == "warm":  # a first build fills the record: not timed
                    shutil.copytree(os.path.join(work, f"cache-{backend}-cold"), cache)
                out = os.path.join(work, run.replace(" ", "-"))
                cmd = [sys.executable, "-c", "from packer._entry import main; main()", "build", src, out, "--tokenizer",
                       path, "--workers", str(workers), "--tokenizer-backend", backend, "--quiet"]
                t0 = time.perf_counter()
                subprocess.run(cmd, env=dict(env0, PACKER_CACHE=cache), check=True, cwd=REPO)
                t[run] = time.perf_counter() - t0
                if backend == "auto":
                    import json

                    picks = json.load(open(os.path.join(out, "manifest.json")))["tokenizer"]["backend"]
            a, b = os.path.join(work, "hf-cold", "shards"), os.path.join(work, "auto-warm", "shards")
            same = sorted(os.listdir(a)) == sorted(os.listdir(b)) and all(
                filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False) for f in os.listdir(a))
        print(f"| {name} | {picks} | {t['hf cold']:.1f} | {t['auto cold']:.1f} | {t['hf warm']:.1f} | "
              f"{t['auto warm']:.1f} | {t['hf cold'] / t['auto cold']:.2f}x | {t['hf warm'] / t['auto warm']:.2f}x | "
              f"{'identical' if same else 'DIFFER'} |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="*", default=[os.path.join(REPO, "sample_data", "corpus.jsonl")])
    ap.add_argument("--only", default=None, help="comma-separated tokenizer names")
    ap.add_argument("--fastokens", action="store_true", help="fastokens against HF and transformers instead")
    ap.add_argument("--builds", type=int, metavar="WORKERS", help="whole builds of INPUT, auto against hf, warm and cold")
    a = ap.parse_args(argv)
    if a.builds:
        return builds(a.inputs[0], a.builds, a.only) or 0
    texts = corpus_texts(a.inputs)
    if a.fastokens:
        return fastokens_exact(texts) or 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        toks = {f"{k} (built)": v for k, v in families.build_all(os.path.join(work, "fam"), families.sample_texts()).items()}
        toks.update({k: v for k, v in REAL.items() if os.path.exists(v)})
        if a.only:
            toks = {k: v for k, v in toks.items() if k.split(" ")[0] in a.only.split(",")}
        rows = [one(k, v, a.inputs, texts, work) for k, v in toks.items()]
    print(f"corpus: {', '.join(a.inputs)}: {len(texts):,} documents; {time.perf_counter() - t0:.0f} s")
    print("| tokenizer | auto picks | each document = transformers + EOS | tiktoken | shards identical | dtype | tokens | what each document gets |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tokenizer']} | {r.get('auto picks')} | {', '.join(r['engines'])} | {r.get('tiktoken', 'accepted')} | "
              f"{'yes' if r['shards identical'] else 'NO'} | {r.get('dtype')} | {r.get('tokens', 0):,} | {r.get('added')} |")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
