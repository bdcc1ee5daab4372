"""Regenerate sample_data/: a small corpus in every input format packer reads.

    python sample_data/make_sample.py

Deterministic (fixed seed): the checked-in files are exactly what this writes.
Document lengths are long-tailed (lognormal: many short documents, a few
longer than 8k tokens), and a few awkward records are planted so the
quickstart shows how they are reported:

- corpus.jsonl: one line of invalid UTF-8, one malformed JSON line, one record
  without the text field, one whose text is a number, one with empty text
- txt/: one empty file, one file of invalid UTF-8 (a binary blob)
- corpus.jsonl.gz, corpus.jsonl.zst, corpus.parquet: clean
"""

from __future__ import annotations

import gzip
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her all she there would their we him been has when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very make world still own see men work "
    "long get here between both life being under never day same another know while last might us great old year "
    "off come since against go came right used take three tensor gradient token packing shard memory attention "
    "dataset batch sequence model training loss layer kernel throughput latency buffer"
).split()
EXTRA = ["naïve", "café", "東京", "数据", "😀", "Ünïcödé", "—", "«quoted»", "x²", "e^{iπ}"]


def document(rng: random.Random, n_words: int) -> str:
    out, line = [], 0
    for i in range(n_words):
        w = rng.choice(EXTRA) if rng.random() < 0.01 else WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)]
        if rng.random() < 0.05:
            w = w.capitalize()
        out.append(w)
        line += 1
        if rng.random() < 0.07:
            out.append(".\n" if rng.random() < 0.3 else ".")
        if rng.random() < 0.01:
            out.append("\n\n")
    text = " ".join(out)
    if rng.random() < 0.1:
        text = "    def f(x):\n        return x * 2\n\n" + text  # some code-like indentation
    return text


def lengths(rng: random.Random, n: int, median_words: float) -> list[int]:
    return [max(1, min(60000, int(rng.lognormvariate(0, 1.3) * median_words))) for _ in range(n)]


def main() -> None:
    rng = random.Random(1234)
    os.makedirs(os.path.join(HERE, "txt", "nested"), exist_ok=True)

    # txt tree: one document per file.
    for i, n in enumerate(lengths(rng, 40, 300)):
        sub = "nested" if i % 3 == 0 else ""
        with open(os.path.join(HERE, "txt", sub, f"doc{i:03d}.txt"), "w", encoding="utf-8") as f:
            f.write(document(rng, n))
    open(os.path.join(HERE, "txt", "empty.txt"), "w").close()
    with open(os.path.join(HERE, "txt", "binary.txt"), "wb") as f:
        f.write(bytes(rng.randrange(256) for _ in range(2000)))

    def records(n: int, median: float, long_every: int = 0):
        for i, m in enumerate(lengths(rng, n, median)):
            if long_every and i % long_every == long_every - 1:
                m = rng.randrange(9000, 20000)  # > 8k tokens
            yield {"id": i, "text": document(rng, m)}

    # corpus.jsonl with the awkward lines.
    with open(os.path.join(HERE, "corpus.jsonl"), "wb") as f:
        for i, rec in enumerate(records(900, 250, long_every=300)):
            f.write(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
            if i == 10:
                f.write(b'{"id": "bad-utf8", "text": "caf\xe9 au lait"}\n')
            if i == 20:
                f.write(b'{"id": "malformed", "text": "no closing brace"\n')
            if i == 30:
                f.write(b'{"id": "no-text", "body": "the field is missing"}\n')
            if i == 40:
                f.write(b'{"id": "number", "text": 42}\n')
            if i == 50:
                f.write(b'{"id": "empty", "text": ""}\n')

    blob = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records(500, 250, long_every=250))
    with open(os.path.join(HERE, "corpus.jsonl.gz"), "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
            g.write(blob)

    import zstandard

    blob = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records(500, 250))
    with open(os.path.join(HERE, "corpus.jsonl.zst"), "wb") as f:
        f.write(zstandard.ZstdCompressor(level=10).compress(blob))

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(records(500, 250, long_every=250))
    table = pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows]})
    pq.write_table(table, os.path.join(HERE, "corpus.parquet"), row_group_size=128, compression="zstd")


if __name__ == "__main__":
    main()
