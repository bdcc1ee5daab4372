"""Issue 52.2: can gigatoken read JSON Lines itself in a packer build and keep packer's documents and skips?

Two parts, side by side in one run:

1. **Semantics.** Small JSON Lines files, one per case packer decides (blank lines, a byte-order mark, malformed
   or truncated lines, a missing or non-string field, invalid UTF-8, a lone surrogate, an integer wider than 64
   bits, duplicate keys, text after the object, raw control characters): packer's records (its reader and parser,
   packer/formats/jsonl.py) against the rows gigatoken's ``encode_files(JsonlFileSource)`` returns, decoded. Each
   case says whether they agree and, where not, whether a count (gigatoken's rows against the file's non-blank
   lines) would show it, or only a parse of every line would.
2. **Cost, CPU-seconds per GB of text on one thread.** (a) packer's worker path today: read the lines, parse each
   (orjson), encode with packer's Encoder (``--tokenizer-backend``, default fastokens); (b) gigatoken reading the
   file itself; (c) (b) made exact: (a)'s read and parse to learn packer's documents, plus (b), plus a decode of
   every row compared with its document's UTF-8 bytes (what a duplicate key or text after the object needs).

    python bench/gigatoken_jsonl.py /tmp/r50.jsonl --tokenizer ../shared/data/gpt2-tokenizer.json

``--parquet``: the same for Parquet (the JSON Lines' documents written as one Parquet file, a string column
``text``): the cases a Parquet column can hold (null, empty, binary, a non-string or dictionary column, no such
column) against ``ParquetFileSource``'s rows; and the cost, where (c) is the column read by pyarrow without a
Python string (its validity, lengths and UTF-8 checked in Arrow: what packer needs to name each row's skip) plus (b).

Needs gigatoken (``pip install gigatoken``). Prints the machine's load beside the timings.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from packer.formats import Document, discover, plan_slices, read_slice  # noqa: E402

CASES = [  # (name, file bytes): each a thing packer's reader decides
    ("clean", b'{"text":"hi"}\n{"text":"there"}\n'),
    ("blank line between", b'{"text":"hi"}\n\n{"text":"there"}\n'),
    ("line of spaces between", b'{"text":"hi"}\n   \n{"text":"there"}\n'),
    ("byte-order mark", b'\xef\xbb\xbf{"text":"hi"}\n{"text":"there"}\n'),
    ("malformed line", b'{"text":"hi"}\n{"text":\n{"text":"x"}\n'),
    ("missing field", b'{"text":"hi"}\n{"other":"a"}\n{"text":"x"}\n'),
    ("non-string field", b'{"text":"hi"}\n{"text":5}\n{"text":"x"}\n'),
    ("empty text", b'{"text":"hi"}\n{"text":""}\n{"text":"x"}\n'),
    ("invalid UTF-8", b'{"text":"hi"}\n{"text":"a\xff"}\n{"text":"x"}\n'),
    ("lone surrogate escape", b'{"text":"hi"}\n{"text":"a\\ud800b"}\n{"text":"x"}\n'),
    ("integer over 64 bits", b'{"text":"hi","n":123456789012345678901234567890}\n{"text":"x"}\n'),
    ("duplicate key", b'{"text":"first","text":"last"}\n{"text":"x"}\n'),
    ("duplicate key, escaped", b'{"text":"first","\\u0074ext":"last"}\n{"text":"x"}\n'),
    ("text after the object", b'{"text":"a"} {"text":"b"}\n{"text":"x"}\n'),
    ("raw tab in a string", b'{"text":"a\tb"}\n{"text":"x"}\n'),
    ("CRLF line ends", b'{"text":"hi"}\r\n{"text":"there"}\r\n'),
    ("special token's string", b'{"text":"a<|endoftext|>b"}\n'),
]


PARQUET_CASES = [  # (name, the column; None: no column "text")
    ("strings", lambda pa: pa.array(["hi", "there"])),
    ("null and empty", lambda pa: pa.array(["hi", None, "", "x"])),
    ("large_string", lambda pa: pa.array(["hi", "x"], pa.large_string())),
    ("binary", lambda pa: pa.array([b"hi", b"a\xff", b"x"], pa.binary())),
    ("integers", lambda pa: pa.array([1, 2])),
    ("dictionary of strings", lambda pa: pa.array(["hi", "x", "hi"]).dictionary_encode()),
    ("no such column", None),
]


def packer_records(path: str) -> list:
    """packer's records of ``path`` in order: the text of a document, or ("skip", reason)."""
    found = discover([path])
    out = []
    for sl, _ in plan_slices(tuple(found.files), 1 << 40):
        out += [rec.text if type(rec) is Document else ("skip", rec.reason) for rec in read_slice(sl)]
    return out


def source(path: str):
    """gigatoken's source of ``path``'s field or column ``text``: Parquet by the name's end, else JSON Lines."""
    import gigatoken

    kind = gigatoken.ParquetFileSource if path.endswith(".parquet") else gigatoken.JsonlFileSource
    return kind([path], "text")


def gigatoken_rows(tk, path: str) -> list | str:
    try:
        rows = tk.encode_files(source(path), parallel=False)
    except BaseException as e:  # a Rust panic is a BaseException
        return f"error: {type(e).__name__}"
    return [bytes(tk.decode(r)).decode("utf-8", "replace") for r in rows]


def semantics(tk, parquet: bool = False) -> list[dict]:
    """Each case's records by packer against gigatoken's rows, and a verdict."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, data in PARQUET_CASES if parquet else CASES:
            path = os.path.join(d, "case.parquet" if parquet else "case.jsonl")
            if parquet:
                pq.write_table(pa.table({"text": data(pa)} if data else {"body": ["hi"]}), path)
            else:
                open(path, "wb").write(data)
            want, got = packer_records(path), gigatoken_rows(tk, path)
            docs = [r for r in want if isinstance(r, str)]
            if got == docs and len(docs) == len(want):
                verdict = "same"
            elif parquet:  # rows aligned with the table: the rows packer skips are known from Arrow
                aligned = not isinstance(got, str) and len(got) == len(want) and all(
                    g == w for g, w in zip(got, want) if isinstance(w, str))
                verdict = ("an error: packer can fall back" if isinstance(got, str) else
                           "rows aligned: packer's skips found in Arrow" if aligned else "DIFFERS")
            elif isinstance(got, str) or len(got) != sum(1 for line in data.split(b"\n") if line.strip()):
                verdict = "differs; the row count shows it"
            else:
                verdict = "DIFFERS; rows == lines: only a parse of every line shows it"
            rows.append({"case": name, "packer": want, "gigatoken": got, "verdict": verdict})
    return rows


def to_parquet(jsonl: str, folder: str) -> str:
    """``jsonl``'s documents (packer's records) as one Parquet file, a string column ``text``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(folder, os.path.basename(jsonl) + ".parquet")
    pq.write_table(pa.table({"text": [r for r in packer_records(jsonl) if isinstance(r, str)]}), path)
    return path


def arrow_skips(path: str) -> int:
    """What packer needs of a Parquet column to name each row's skip, without a Python string: the column read by
    pyarrow, its UTF-8 checked, its nulls and empty rows counted."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    col = pq.read_table(path, columns=["text"]).column("text")
    col.validate(full=True)  # (full: every value's UTF-8)
    return col.null_count + int(pc.sum(pc.equal(pc.binary_length(col), 0)).as_py() or 0)


def _flat(rows):
    """gigatoken's rows (an awkward array) as (every id back to back, uint32; the rows' offsets into them, int64)."""
    import numpy as np

    offs = np.asarray(rows.layout.offsets, np.int64)
    return np.asarray(rows.layout.content.data, np.uint32)[offs[0]:offs[-1]], offs - offs[0]


def cost(path: str, tokenizer: str, backend: str, rounds: int) -> dict:
    """CPU-seconds of (a), (b) and (c) on ``path`` (best of ``rounds``), and whether their ids agree."""
    import gigatoken
    import numpy as np

    from packer.tokenize import Encoder, choose_backend, resolve_tokenizer

    info = choose_backend(resolve_tokenizer(tokenizer, eos=False, bos=False), backend)
    enc, tk = Encoder(info), gigatoken.Tokenizer.from_json(info.json)
    widths = np.array([len(bytes(tk.decode([i]))) for i in range(tk.vocab_size)], np.int64)  # bytes per token id
    best: dict = {}

    def timed(key, fn):
        c = time.process_time()
        out = fn()
        best[key] = min(best.get(key, 1e9), time.process_time() - c)
        return out

    for _ in range(rounds):
        texts = timed("read+parse", lambda: [r for r in packer_records(path) if isinstance(r, str)])
        ids, lengths = timed("encode", lambda: enc.encode_flat(texts))
        rows = timed("gigatoken files", lambda: tk.encode_files(source(path), parallel=False))
        if path.endswith(".parquet"):  # rows aligned with the column: its skips from Arrow, no decode needed
            timed("arrow skips", lambda: arrow_skips(path))
            same = len(rows) == len(texts)
        else:
            same = timed("decode+compare", lambda: rows_are(tk, rows, texts, widths))
    flat = _flat(rows)[0]
    gb = sum(len(t.encode("utf-8")) for t in texts) / 1e9
    today = best["read+parse"] + best["encode"]
    exact = best["gigatoken files"] + (best["arrow skips"] if "arrow skips" in best else
                                       best["read+parse"] + best["decode+compare"])
    return {"gb": gb, "docs": len(texts), "backend": info.backend,
            "per_gb": {k: v / gb for k, v in best.items()}, "today": today / gb, "gigatoken": best["gigatoken files"] / gb,
            "exact": exact / gb, "same_ids": bool(np.array_equal(flat, ids)), "rows_equal_texts": same}


def rows_are(tk, rows, texts: list[str], widths) -> bool:
    """Whether gigatoken's ``rows`` are ``texts``, document by document: the cheapest exact certificate found (one
    decode of every id against the documents' joined UTF-8, and each row's byte count from ``widths``, bytes per id,
    against each document's)."""
    import numpy as np

    if len(rows) != len(texts):
        return False
    flat, offs = _flat(rows)
    row_bytes = np.concatenate([[0], np.cumsum(widths[flat])])[offs]
    encoded = [t.encode("utf-8") for t in texts]
    if not np.array_equal(np.diff(row_bytes), np.fromiter(map(len, encoded), np.int64, len(encoded))):
        return False
    return bytes(tk.decode(flat)) == b"".join(encoded)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsonl", help="real JSON Lines, a 'text' field per line (bench/real_corpus.py makes one)")
    ap.add_argument("--tokenizer", required=True, help="a tokenizer.json gigatoken loads (byte-level BPE: GPT-2, Llama 3)")
    ap.add_argument("--backend", default="fastokens", help="packer's encoder for (a) (default fastokens)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parquet", action="store_true", help="Parquet: the documents written as a Parquet file first")
    args = ap.parse_args()
    try:
        import gigatoken
    except ImportError:
        raise SystemExit("gigatoken_jsonl.py: needs gigatoken (pip install gigatoken)")

    tk = gigatoken.Tokenizer.from_json(open(args.tokenizer, encoding="utf-8").read())
    from importlib.metadata import version

    kind = "ParquetFileSource" if args.parquet else "JsonlFileSource"
    print(f"== semantics: packer's records against gigatoken {version('gigatoken')}'s {kind} rows")
    for r in semantics(tk, args.parquet):
        print(f"  {r['case']:26s} {r['verdict']:60s} packer {r['packer']!r:.70}  gigatoken {r['gigatoken']!r:.60}")
    tmp = tempfile.TemporaryDirectory()
    path = to_parquet(args.jsonl, tmp.name) if args.parquet else args.jsonl
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    c = cost(path, args.tokenizer, args.backend, args.rounds)
    print(f"== cost on {path}: {c['gb']:.3f} GB of text, {c['docs']:,} documents, one thread, best of {args.rounds}; "
          f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}; {time.perf_counter() - t0:.0f} s")
    print("  CPU-s per GB: " + ", ".join(f"{k} {v:.2f}" for k, v in c["per_gb"].items()))
    print(f"  (a) packer today (read+parse+encode, {c['backend']}): {c['today']:.2f}   (b) gigatoken files: {c['gigatoken']:.2f}"
          f" = {c['gigatoken'] / c['today']:.2f}x (a)   (c) (b) made exact: {c['exact']:.2f} = {c['exact'] / c['today']:.2f}x (a)")
    print(f"  gigatoken's ids == packer's: {c['same_ids']}; every row decodes to its document: {c['rows_equal_texts']}")


if __name__ == "__main__":
    main()
