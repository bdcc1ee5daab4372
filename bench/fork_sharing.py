"""Do forked workers keep sharing the tokenizer they inherit, once they encode?

A build's local engine builds the encoder (for tiktoken: its rank table) in the
main process and forks its workers, which inherit it copy-on-write: one copy in
memory and in the shared cache, as long as no worker writes to its pages. This
builds the encoder as a build does, forks one child, lets it encode the corpus,
and prints the child's memory from ``/proc/PID/smaps_rollup`` (MiB) right after
the fork and after encoding. Private_Dirty that grows towards the encoder's size
would mean each worker ends up with its own copy.

    python bench/fork_sharing.py bench_out/real/real.jsonl --tokenizer ../shared/data/llama3 --mb 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common import corpus_texts  # noqa: E402
from packer.tokenize import Encoder, choose_backend, resolve_tokenizer  # noqa: E402

FIELDS = ("Rss", "Shared_Clean", "Shared_Dirty", "Private_Clean", "Private_Dirty")


def memory() -> dict[str, int]:
    """This process's memory by kind, MiB (Linux only)."""
    got = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in FIELDS:
                got[key] = int(rest.split()[0]) >> 10
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--tokenizer")
    ap.add_argument("--mb", type=float, default=20, help="MB of text the child encodes")
    args = ap.parse_args()
    texts, size = [], 0
    for t in corpus_texts(args.inputs):
        texts.append(t)
        size += len(t)
        if size >= args.mb * 1e6:
            break
    before = memory()
    info = choose_backend(resolve_tokenizer(args.tokenizer), "auto", lambda: texts[:50])
    encoder = Encoder(info)
    encoder.encode_flat(texts[:2])
    print(f"{info.backend}: the encoder added {memory()['Rss'] - before['Rss']} MiB to the main process")
    pid = os.fork()
    if pid == 0:
        forked = memory()
        t0 = time.process_time()
        for b in range(0, len(texts), 64):
            encoder.encode_flat(texts[b : b + 64])
        cpu = time.process_time() - t0
        print(f"child right after the fork:   {forked}")
        print(f"child after encoding {size / 1e6:.0f} MB: {memory()} ({cpu:.2f} CPU s)", flush=True)
        os._exit(0)
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
