"""Each model family's tokenizer: packer's ids against transformers' own, per document, on every engine.

For every tokenizer (the small families of bench/families.py, built now, and
the real files in ../shared/data where present) and every engine packer
accepts for it (auto, hf, and tiktoken where auto chose it), this:

1. builds the corpus with ``packer build`` (the API, one worker) and
   compares the shard checksums across engines (they must be identical);
2. encodes every document with the Encoder a build worker runs, and compares
   its ids with ``transformers.AutoTokenizer`` (``PreTrainedTokenizerFast`` for
   a lone tokenizer.json): ``tokenizer(text)["input_ids"]``, plus EOS unless the
   template already ends with it (docs/tokenizers.md, "What each document gets").

It prints one row per tokenizer and exits 1 on any difference.

    python bench/real_corpus.py bench_out/real --mb 60      # once: real text from this machine
    python bench/family_exact.py bench_out/real/real.jsonl  # or: sample_data
    python bench/family_exact.py sample_data --normalize-cost  # what NFC costs the fast backend

``--normalize-cost`` times the fast backend of a Qwen-class tokenizer (NFC, built
now) on the corpus, alternating per round: with packer's normalizer (tokenizers'
own NFC, skipped on texts of boundary characters: packer/tokenize/backend/normalize.py),
with tokenizers' NFC on every non-ASCII text, with Python's ``unicodedata`` (what
the backend used before: not exact), and with no normalizer (the ids then differ;
a floor). Medians over rounds of CPU seconds, as ratios to ``unicodedata``.
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
    out = []
    for ids in hf(texts, truncation=False)["input_ids"]:
        out.append(ids if eos is None or ids[-1:] == [eos] else ids + [eos])
    return out


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


def normalize_cost(texts: list[str], rounds: int) -> None:
    import statistics
    import unicodedata

    from tokenizers import normalizers

    from packer.tokenize import backend as T

    with tempfile.TemporaryDirectory() as work:
        js = open(os.path.join(families.build_all(work, families.sample_texts(), ["qwen-like"])["qwen-like"],
                               "tokenizer.json")).read()
    nfc = normalizers.NFC().normalize_str
    variants = {"packer (tokenizers NFC, skipped on boundaries)": T.Normalizer("NFC"),
                "tokenizers NFC on every non-ASCII text": lambda t: t if t.isascii() else nfc(t),
                "unicodedata (before; not exact)": lambda t: t if t.isascii() else unicodedata.normalize("NFC", t),
                "no normalizer (floor; ids differ)": lambda t: t}
    from dataclasses import replace

    base = T.TiktokenEncoder(js, replace(T.convert(js), normalize=None))  # tiktoken alone: each variant normalizes first
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, norm in variants.items():
            t0 = time.process_time()
            for t in texts:
                base._buffer(norm(t), base._allowed)
            times[name].append(time.process_time() - t0)
    ref = statistics.median(times["unicodedata (before; not exact)"])
    chars = sum(map(len, texts))
    print(f"{len(texts):,} texts, {chars / 1e6:.2f} M characters, {sum(not t.isascii() for t in texts):,} not ASCII; "
          f"{rounds} rounds, median CPU s")
    print("| normalizer before tiktoken | CPU s | / unicodedata |")
    print("|---|---|---|")
    for name in variants:
        m = statistics.median(times[name])
        print(f"| {name} | {m:.3f} | {m / ref:.2f} |")
    same = [base.encode_lists([variants["packer (tokenizers NFC, skipped on boundaries)"](t)])[0] for t in texts[:300]]
    hf = [e.ids for e in __import__("tokenizers").Tokenizer.from_str(js).encode_batch(texts[:300], add_special_tokens=False)]
    print(f"packer's ids = HF's on the first {len(hf)} texts: {same == hf}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="*", default=[os.path.join(REPO, "sample_data", "corpus.jsonl")])
    ap.add_argument("--only", default=None, help="comma-separated tokenizer names")
    ap.add_argument("--normalize-cost", action="store_true", help="time NFC before the fast backend instead")
    ap.add_argument("--rounds", type=int, default=5, help="with --normalize-cost")
    a = ap.parse_args(argv)
    texts = corpus_texts(a.inputs)
    if a.normalize_cost:
        normalize_cost(texts, a.rounds)
        return 0
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
