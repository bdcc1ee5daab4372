"""Peak memory of `packer build` as the corpus grows: x1 against x10.

The x10 corpus is the x1 corpus replicated (hard links, so it costs no
disk). Each build runs as a subprocess; a sampler sums the memory (PSS:
shared pages split between the processes sharing them) of the whole process
tree (main + workers) every 20 ms, and
``getrusage(RUSAGE_CHILDREN).ru_maxrss`` gives the largest single process.
Memory is bounded by ``--unit-mb`` (a unit's tokens are held until its shard
is written) and by the chunks in flight (2 per worker), never by the corpus,
so pick an x1 corpus of at least a few units.

    python bench/rss_bench.py bench_out/real/real.jsonl --unit-mb 16 --workers 2
    python bench/rss_bench.py bench_out/sub/sub.jsonl --unit-mb 4 --workers 2 --tokenizer gpt2

Each corpus is built ``--repeat`` times and the highest peak counts (a
peak is a coincidence of transients: two workers packing while the main
process holds the next unit).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from common import GPT2, REPO, emit_json, hf_engine_args  # bench/common.py



def _pss(pid: int) -> int:
    """Proportional set size: resident bytes, pages shared by k processes counted 1/k each
    (forked workers share the parent's pages until they write them)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _spill_bytes(pid: int) -> int:
    """Bytes of build ``pid``'s chunk files (packer/pipeline/spill.py): memory in /dev/shm that no
    process's PSS shows while it is not mapped (counted twice while the assembler maps it)."""
    import tempfile

    total = 0
    for base in ("/dev/shm", tempfile.gettempdir()):
        try:
            names = [n for n in os.listdir(base) if n.startswith(f"packer-spill-{pid}-")]
        except OSError:
            continue
        for n in names:
            try:
                for e in os.scandir(os.path.join(base, n)):
                    total += e.stat().st_blocks * 512
            except OSError:
                pass
    return total


def _tree_rss(root: int) -> int:
    """Memory of ``root`` and all its descendants: the sum of their PSS, plus its chunk files."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(int(st[1]), []).append(int(name))
    total, todo = _spill_bytes(root), [root]
    while todo:
        p = todo.pop()
        total += _pss(p)
        todo.extend(kids.get(p, []))
    return total


def measure(cmd: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(p.pid))
            done.wait(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, err = p.communicate()
    done.set()
    th.join()
    if p.returncode:
        sys.exit(err)
    maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"seconds": time.perf_counter() - t, "tree_peak_bytes": peak[0],
            "largest_process_bytes": maxrss if maxrss > before * 1024 else None}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", help="a .jsonl file (the x1 corpus)")
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--unit-mb", type=float, default=16)
    ap.add_argument("--tokenizer", default="bytes", help="'bytes' (fast), 'gpt2' (../shared/data) or a path")
    ap.add_argument("--repeat", type=int, default=2, help="builds per corpus; the highest peak counts")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    args = ap.parse_args(argv)
    tok = GPT2 if args.tokenizer == "gpt2" else args.tokenizer
    # HF tokenizers (its encodings are the larger) where packer could also pick tiktoken.
    extra = hf_engine_args() if tok != "bytes" else []
    rows = []
    with tempfile.TemporaryDirectory(dir=os.path.join(REPO, "bench_out")) as d:
        corpora = {}
        for k in (1, args.copies):
            folder = os.path.join(d, f"x{k}")
            os.makedirs(folder)
            for i in range(k):
                os.link(os.path.abspath(args.corpus), os.path.join(folder, f"copy{i:03d}.jsonl"))
            corpora[k] = folder
        for k, folder in corpora.items():
            out = os.path.join(d, f"out{k}")
            cmd = [sys.executable, "-m", "packer.cli", "build", folder, out, "--tokenizer", tok,
                   "--workers", str(args.workers), "--unit-mb", str(args.unit_mb), "-q", *extra]
            runs = []
            for _ in range(args.repeat):
                runs.append(measure(cmd))
                with open(os.path.join(out, "manifest.json")) as f:
                    m = json.load(f)
                shutil.rmtree(out)
            r = max(runs, key=lambda x: x["tree_peak_bytes"])
            r["tree_peaks_bytes"] = [x["tree_peak_bytes"] for x in runs]
            r.update({"copies": k, "input_bytes": m["totals"]["input_bytes"], "tokens": m["totals"]["tokens"],
                      "shards": len(m["shards"]), "cmd": " ".join(cmd[1:])})
            rows.append(r)
            print(f"x{k:<3} {r['input_bytes'] / 1e6:8.1f} MB in, {r['tokens'] / 1e6:8.1f} M tokens, "
                  f"{r['shards']:3d} shards, {r['seconds']:6.1f}s: peak PSS of the process tree "
                  f"{r['tree_peak_bytes'] / 2**20:7.1f} MiB (runs: "
                  f"{', '.join(f'{x / 2**20:.0f}' for x in r['tree_peaks_bytes'])})", flush=True)
    a, b = rows[0]["tree_peak_bytes"], rows[-1]["tree_peak_bytes"]
    print(f"peak memory x{args.copies} / x1 = {b / a:.3f} (target <= 1.10)")
    emit_json({"bench": "rss_bench", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows,
               "ratio": b / a}, args.json)


if __name__ == "__main__":
    main()
