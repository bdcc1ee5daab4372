"""Reading speed and memory of each input format, side by side, on the same records.

    python bench/format_read_bench.py [--mb 64] [--repeat 3]

Writes the same records (real-ish text: bench/real_corpus.py's lines where it
works, else generated words) as .jsonl, .ndjson.bz2, .jsonl.xz, .json (a
compact array and a pretty-printed one), .parquet and .arrow (an Arrow IPC
stream, as HF save_to_disk writes), then reads each with packer's reader
(``read_slice``: I/O, decompression, splitting and parsing; no tokenizing),
``--repeat`` times, round-robin over the formats. Prints MB/s of the records' text, the median time as a
ratio of .jsonl's (measured in the same run), and the peak Python heap
(tracemalloc) while reading, against the file size: a streamed reader's peak
does not grow with the file.
"""

from __future__ import annotations

import argparse
import bz2
import json
import lzma
import os
import statistics
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from packer.formats import Document, discover, plan_slices, read_slice  # noqa: E402


def records(mb: float) -> list[str]:
    words = ("the of and to in is was for on that with as by at from his her an which be this are or had not but "
             "were have it they one all their been has more when who will no there can also into only other new some "
             "could time these two may than first then do any like my now over such our man me even most made after").split()
    import random

    rng = random.Random(0)  # the same records every run; words drawn at random, so compression is not absurd
    out, size, i = [], 0, 0
    while size < mb * (1 << 20):
        n = rng.randint(20, 920)  # words per record
        t = " ".join(rng.choices(words, k=n)) + f" \"{i}\"\n\\ é"  # quotes, escapes, non-ASCII: JSON escapes
        out.append(t)
        size += len(t)
        i += 1
    return out


def write_all(texts: list[str], d: str) -> dict[str, str]:
    lines = b"".join(json.dumps({"text": t, "id": i}).encode() + b"\n" for i, t in enumerate(texts))
    paths = {}

    def put(name, data):
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(data)
        paths[name] = p

    put("c.jsonl", lines)
    put("c.ndjson.bz2", bz2.compress(lines, 6))
    put("c.jsonl.xz", lzma.compress(lines, preset=1))
    put("c.json", json.dumps([{"text": t, "id": i} for i, t in enumerate(texts)]).encode())
    put("pretty.json", json.dumps([{"text": t, "id": i} for i, t in enumerate(texts)], indent=2).encode())
    table = pa.table({"text": texts, "id": list(range(len(texts)))})
    p = os.path.join(d, "c.parquet")
    pq.write_table(table, p, row_group_size=8192)
    paths["c.parquet"] = p
    p = os.path.join(d, "c.arrow")
    with pa.OSFile(p, "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        for b in table.to_batches(max_chunksize=1000):
            w.write_batch(b)
    paths["c.arrow"] = p
    return paths


def read_once(path: str) -> tuple[float, int, int]:
    """(seconds, documents, text chars) for one full read of ``path`` with packer's reader."""
    t0 = time.perf_counter()
    docs = chars = 0
    for sl, _ in plan_slices(discover([path]).files, 1 << 40):
        for r in read_slice(sl):
            if type(r) is Document:
                docs += 1
                chars += len(r.text)
    return time.perf_counter() - t0, docs, chars


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    texts = records(a.mb)
    mb_text = sum(len(t) for t in texts) / (1 << 20)
    with tempfile.TemporaryDirectory() as d:
        paths = write_all(texts, d)
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(a.repeat):  # round-robin, so a burst of load on a shared machine hits every format alike
            for name, p in paths.items():
                s, docs, _ = read_once(p)
                assert docs == len(texts), (name, docs, len(texts))
                times[name].append(s)
        results = {}
        for name, p in paths.items():
            tracemalloc.start()
            read_once(p)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            results[name] = (statistics.median(times[name]), os.path.getsize(p), peak)
        base = results["c.jsonl"][0]
        print(f"{len(texts):,} records, {mb_text:.1f} MB of text; median of {a.repeat} reads; cpu_count {os.cpu_count()}")
        print(f"{'file':<14}{'file MB':>9}{'MB/s':>9}{'x jsonl time':>14}{'peak heap MB':>14}")
        for name, (t, size, peak) in results.items():
            print(f"{name:<14}{size / (1 << 20):>9.1f}{mb_text / t:>9.1f}{t / base:>14.2f}{peak / (1 << 20):>14.1f}")


if __name__ == "__main__":
    main()
