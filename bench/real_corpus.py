"""Collect real text from this machine into a jsonl corpus for benchmarks.

Text nobody here wrote has the long-tailed length distribution of real
corpora: Python standard-library source, man pages, package documentation
and C headers. Selection is deterministic (sorted paths, a fixed stride), so
two runs on one machine give the same corpus.

    python bench/real_corpus.py bench_out/real --mb 60

Writes OUT/real.jsonl (one document per source file) and OUT/txt/ (the same
documents as a tree of small .txt files, for the many-small-files case).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import sys
import sysconfig

ROOTS = [
    (os.path.dirname(os.__file__), (".py",)),  # Python standard library source
    ("/usr/share/man", (".gz",)),  # man pages (troff), gzipped
    ("/usr/share/doc", (".txt", ".md", ".html", ".gz", "README", "copyright", "changelog")),
    ("/usr/include", (".h",)),
]
# Read only once ROOTS run out (a host with little of them: 200 MB asked for), so a corpus that ROOTS fill is
# the same as before: the installed packages' sources and docs (.py, C/C++ headers, .md, .rst, .txt).
MORE_ROOTS = [(p, (".py", ".h", ".hpp", ".md", ".rst", ".txt")) for p in
              dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")) if os.path.isdir(p)]


def _walk(root, exts):
    for dirpath, dirs, names in os.walk(root):
        dirs.sort()
        for n in sorted(names):
            if n.endswith(exts) or n in exts:
                yield os.path.join(dirpath, n)


def iter_files():
    """Round-robin over the roots, so every kind of text is in the mix; then over MORE_ROOTS."""
    seen = set()  # (a package folder can lie under the standard library's)
    for path in itertools.chain(_round_robin(ROOTS), _round_robin(MORE_ROOTS)):
        if (real := os.path.realpath(path)) not in seen:
            seen.add(real)
            yield path


def _round_robin(roots):
    its = [_walk(root, exts) for root, exts in roots]
    while its:
        for it in list(its):
            try:
                yield next(it)
            except StopIteration:
                its.remove(it)


def read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(8 << 20)
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None
    return text if text.strip() else None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=60, help="stop after this many MB of text")
    ap.add_argument("--no-txt", action="store_true", help="skip writing the txt tree")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    budget = int(args.mb * 1e6)
    n = total = 0
    txt_dir = os.path.join(args.out, "txt")
    with open(os.path.join(args.out, "real.jsonl"), "w", encoding="utf-8") as f:
        for path in iter_files():
            text = read_text(path)
            if text is None:
                continue
            f.write(json.dumps({"text": text, "source": path}, ensure_ascii=False) + "\n")
            if not args.no_txt:
                d = os.path.join(txt_dir, f"{n // 1000:03d}")
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, f"{n:06d}.txt"), "w", encoding="utf-8") as t:
                    t.write(text)
            n += 1
            total += len(text.encode())
            if total >= budget:
                break
    print(f"{n} documents, {total / 1e6:.1f} MB -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
