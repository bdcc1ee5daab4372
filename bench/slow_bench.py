"""`packer build` from a slow mount: does reading hide behind tokenizing?

For two layouts of the same real text (one big .jsonl; thousands of small
.txt files of a few KB) and two bandwidths (below, then above, the rate at
which N cores tokenize), it mounts the corpus through ``bench/slowfs.py``
(FUSE: per-request latency + bandwidth cap) and times, side by side:

- read: the pure read time, every byte of the corpus read through the mount
  by 32 threads (4 MB ranges of big files read in parallel), nothing else;
- tokenize: the tokenizer ceiling, texts in memory, on N cores
  (``build_bench.ceiling``);
- build: ``packer build`` reading from the mount, --workers N, end to end
  (``--tokenizer-backend hf``: the engine the ceiling measures), with its
  CPU time: at one worker, wall minus CPU is the time it sat waiting for
  the mount, i.e. the reading that did not hide behind tokenizing;
- the same build from local disk, right after: the difference is what the
  mount costs the build (at one worker, CPU on the tokenizer's core). Their
  ratio (mount / local disk) does not depend on the ceiling, which drifts
  with the machine's load from one minute to the next.

Target: build <= 1.1 x max(read, tokenize). Needs root, /dev/fuse, fuse +
libfuse2 (apt) and fusepy (pip).

    python bench/slow_bench.py --mb 6 --workers 1 --latency-ms 5
    python bench/slow_bench.py --mb 20 --layouts big --bandwidths above --rounds 3   # one case, 3 times
    python bench/slow_bench.py --mb 20 --per-file    # what one small file costs the reader, alone

The FUSE daemon is pinned to the cores the build does not use, where there
are any: it stands in for a file server, which would not take the client's
CPU (in Python it costs far more per request than a kernel NFS client).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from build_bench import build, ceiling  # bench/ is the script's folder, first on sys.path
from slowfs import SlowMount

from common import GPT2, REAL, REPO, emit_json, hf_engine_args  # bench/common.py



def make_corpora(src_jsonl: str, out: str, mb: float, piece_bytes: int = 3000) -> tuple[str, str]:
    """bench_out/slow/big/one.jsonl (the first ``mb`` MB of documents) and
    bench_out/slow/small/ (the same texts cut at line ends into ~3 KB .txt files)."""
    big, small = os.path.join(out, "big"), os.path.join(out, "small")
    stamp = os.path.join(out, f".made-{mb}")
    if os.path.exists(stamp):
        return big, small
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(big)
    n_files = total = 0
    with open(src_jsonl, "rb") as f, open(os.path.join(big, "one.jsonl"), "wb") as g:
        for line in f:
            if total >= mb * 1e6:
                break
            g.write(line)
            total += len(line)
            text = json.loads(line)["text"]
            piece = []
            for ln in text.splitlines(keepends=True):
                piece.append(ln)
                if sum(map(len, piece)) >= piece_bytes:
                    n_files = _write_piece(small, n_files, piece)
                    piece = []
            if piece:
                n_files = _write_piece(small, n_files, piece)
    open(stamp, "w").close()
    return big, small


def _write_piece(folder: str, i: int, piece: list[str]) -> int:
    d = os.path.join(folder, f"{i // 1000:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{i:06d}.txt"), "w", encoding="utf-8") as t:
        t.write("".join(piece))
    return i + 1


def pure_read(root: str, threads: int = 32, block: int = 4 << 20) -> tuple[float, int]:
    """Seconds to read every byte under ``root`` with ``threads`` readers at once."""
    t = time.perf_counter()
    files = []
    for dirpath, _, names in os.walk(root):
        files.extend(os.path.join(dirpath, n) for n in names)

    def ranges():
        for p in files:
            size = os.path.getsize(p)
            for off in range(0, max(size, 1), block):
                yield p, off

    def read(job):
        p, off = job
        fd = os.open(p, os.O_RDONLY)
        try:
            return len(os.pread(fd, block, off))
        finally:
            os.close(fd)

    with ThreadPoolExecutor(threads) as ex:
        n = sum(ex.map(read, ranges()))
    return time.perf_counter() - t, n


def per_file_cost(root: str, mnt: str, n: int = 1500) -> dict:
    """What reading one small file through the mount costs the reading thread, alone: the mount
    without latency or bandwidth cap, files read one after another by one thread the way the build
    reads them (``sources._read_whole``), once with the kernel's cache of names gone cold (as when
    reading starts a while after discovery) and once right after a ``stat`` of each file. Per file:
    CPU microseconds (user, system) and context switches, from ``getrusage(RUSAGE_THREAD)``; each
    FUSE request is one voluntary switch (the thread sleeps until the daemon answers)."""
    import resource

    from packer.io import storage_for

    names = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)[:2 * n]
    out = {}
    with SlowMount(root, mnt, 0, 0, cpus=sorted(os.sched_getaffinity(0))[1:] or None):
        paths = [os.path.join(mnt, x) for x in names]
        sizes = {p: os.path.getsize(p) for p in paths}
        for label, group in (("cold names", paths[0::2]), ("after a stat", paths[1::2])):
            if label == "cold names":
                time.sleep(1.5)  # past the mount's 1 s entry and attribute timeouts
            else:
                for p in group:
                    os.stat(p)
            r0 = resource.getrusage(resource.RUSAGE_THREAD)
            for p in group:
                storage_for(p).read(size_hint=sizes[p])
            r1 = resource.getrusage(resource.RUSAGE_THREAD)
            k = len(group)
            out[label] = {"user_us": (r1.ru_utime - r0.ru_utime) / k * 1e6, "sys_us": (r1.ru_stime - r0.ru_stime) / k * 1e6,
                          "voluntary_switches": (r1.ru_nvcsw - r0.ru_nvcsw) / k, "files": k}
            print(f"per file through the mount ({label}): user {out[label]['user_us']:.0f} us, system "
                  f"{out[label]['sys_us']:.0f} us, {out[label]['voluntary_switches']:.2f} FUSE round trips", flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=REAL)
    ap.add_argument("--mb", type=float, default=6, help="corpus size taken from --src")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--build-cores", type=int, default=None,
                    help="cores the build is pinned to (default: --workers): one more lets its reading run beside "
                         "the tokenizer; the ceiling keeps --workers cores")
    ap.add_argument("--latency-ms", type=float, default=5.0, help="per read request")
    ap.add_argument("--below", type=float, default=0.5, help="slow bandwidth, as a fraction of the tokenize rate")
    ap.add_argument("--above", type=float, default=3.0, help="fast bandwidth, as a multiple of the tokenize rate")
    ap.add_argument("--tokenizer", default=GPT2)
    ap.add_argument("--layouts", nargs="+", choices=["big", "small"], default=["big", "small"])
    ap.add_argument("--bandwidths", nargs="+", choices=["below", "above"], default=["below", "above"])
    ap.add_argument("--rounds", type=int, default=1, help="times each case is run (each is its own row)")
    ap.add_argument("--per-file", action="store_true",
                    help="only measure what one small file read through the mount costs the reading thread")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    args = ap.parse_args(argv)
    tok = os.path.abspath(args.tokenizer)
    big, small = make_corpora(args.src, os.path.join(REPO, "bench_out", "slow"), args.mb)
    if args.per_file:
        mnt = tempfile.mkdtemp(prefix="slowfs-")
        res = per_file_cost(small, mnt)
        os.rmdir(mnt)
        emit_json({"bench": "slow_bench", "per_file": res, "time": time.strftime("%Y-%m-%d %H:%M:%S")}, args.json)
        return
    extra = hf_engine_args()  # the ceiling's engine
    rows = []
    mnt = tempfile.mkdtemp(prefix="slowfs-")
    # The daemon is Python and costs about as much CPU per request as a real server would on its own
    # machine; give it the cores the build does not use (build and ceiling take cores 0..N-1).
    build_cores = args.build_cores or args.workers
    spare = sorted(os.sched_getaffinity(0))[max(args.workers, build_cores):] or None
    print(f"slowfs daemon on cores {spare if spare else 'any (no core is spare: it competes with the build)'}")
    layouts = [(n, r) for key, n, r in (("big", "one big file", big), ("small", "many small files", small))
               if key in args.layouts]
    for name, root in layouts:
        n_files = sum(len(f) for _, _, f in os.walk(root))
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
        c = ceiling([root], tok, args.workers, 8_000_000)
        rate = size / c["seconds"]  # input bytes per second that N cores tokenize
        cases = [(lb, f) for lb, f in (("below", args.below), ("above", args.above)) if lb in args.bandwidths]
        for label, factor in cases * args.rounds:
            mbps = rate * factor / 1e6
            with SlowMount(root, mnt, args.latency_ms, mbps, cpus=spare):
                read_s, nbytes = pure_read(mnt)
            # The tokenize time again, right before the build: on a shared
            # machine it moves with the load, and each row compares neighbours.
            c = ceiling([root], tok, args.workers, 8_000_000)
            with SlowMount(root, mnt, args.latency_ms, mbps, cpus=spare):
                b = build([mnt], tok, args.workers, extra, cores=build_cores)  # pinned to cores 0.., with its CPU time
                build_s, build_cpu = b["seconds"], b["cpu"]
            # The same build from local disk, next to it: what the mount itself costs the build.
            local = build([root], tok, args.workers, extra, cores=build_cores)
            bound = max(read_s, c["seconds"])
            row = {"layout": name, "files": n_files, "daemon_cpus": spare, "bytes": size, "bandwidth": label, "mbps": mbps,
                   "latency_ms": args.latency_ms, "workers": args.workers, "build_cores": build_cores, "read_s": read_s,
                   "tokenize_s": c["seconds"], "build_s": build_s, "build_cpu_s": build_cpu,
                   "local_build_s": local["seconds"], "local_build_cpu_s": local["cpu"],
                   "ratio": build_s / bound, "mount_over_local": build_s / local["seconds"]}
            rows.append(row)
            print(f"{name:17s} ({n_files} files, {size / 1e6:.1f} MB) bandwidth {mbps:6.2f} MB/s ({label} tokenize "
                  f"rate {rate / 1e6:.2f} MB/s): read {read_s:6.2f}s tokenize {c['seconds']:6.2f}s "
                  f"build {build_s:6.2f}s (CPU {build_cpu:6.2f}s; from local disk {local['seconds']:6.2f}s, CPU "
                  f"{local['cpu']:6.2f}s) -> build / max = {build_s / bound:.3f} (mount / local disk {build_s / local['seconds']:.3f})",
                  flush=True)
    os.rmdir(mnt)
    emit_json({"bench": "slow_bench", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, args.json)


if __name__ == "__main__":
    main()
