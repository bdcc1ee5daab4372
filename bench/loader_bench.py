"""Loader throughput: PackedDataset against a nanoGPT-style np.memmap loader and a plain memcpy.

    python bench/loader_bench.py                        # bench_out/loader/real_2048 (built if missing)
    python bench/loader_bench.py --build out/ --batches 200 --rounds 3
    python bench/loader_bench.py --ipc                  # only: how a worker hands a batch over
    python bench/loader_bench.py --build out/ --verify  # only: an epoch with verify=False against the default

All variants read the same token bytes: the build's shards, and ``tokens.bin`` (its input_ids flat as
uint16, what nanoGPT's prepare.py makes), each its own random rows (disjoint slices of one
permutation, so none reads rows another has just pulled into the CPU caches):

- random access, one row per call: ``packed ds[i]`` (input_ids, labels, position_ids, doc_lens);
  ``nanoGPT row`` (x and y as int64 from np.memmap); ``memcpy row`` (the row's uint16 bytes copied);
- DataLoader, batch 8 x seq_len, 0/1/2 workers: ``packed`` (PackedDataset + packer.collate, rows by
  __getitems__); ``packed, per-row`` (ds[i] one row at a time); ``nanoGPT`` (its (x, y),
  default_collate); ``memcpy``; and ``nanoGPT get_batch`` (its own loop, memmap opened per batch).

Variants of a group run in alternating chunks (20 rows or 2 batches, who goes first rotating), so
load from other processes hits them alike; single-process variants in the thread's CPU time,
DataLoaders with workers in wall time. Reported: the median of the rounds, the median of the
per-round ratios to nanoGPT's loader of the same group, and the multiple of what an H200 trains GPT-2
small at (--gpu-tokens-per-s, default 0.4M). Data is in the page cache: this measures the loader.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from common import GPT2, need_real  # bench/common.py
from packer import PackedDataset, collate



# --------------------------------------------------------------------------
# Baselines over tokens.bin.


class NanoRows(Dataset):
    """nanoGPT's get_batch, one row per item: (x, y) int64 from a uint16 memmap."""

    def __init__(self, path: str, seq_len: int):
        self.path, self.L = path, seq_len
        self.n = (os.path.getsize(path) // 2 - 1) // seq_len
        self.data = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.data is None:  # opened lazily in each worker
            self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
        o = i * self.L
        x = torch.from_numpy(self.data[o:o + self.L].astype(np.int64))
        y = torch.from_numpy(self.data[o + 1:o + 1 + self.L].astype(np.int64))
        return x, y

    def __getstate__(self):
        return {**self.__dict__, "data": None}


class MemcpyRows(NanoRows):
    """The row's uint16 bytes, copied: the floor for any loader of these bytes."""

    def __getitem__(self, i):
        if self.data is None:
            self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
        o = i * self.L
        return torch.from_numpy(np.array(self.data[o:o + self.L]))


class PerRow(Dataset):
    """A PackedDataset seen without its batched __getitems__ (one ds[i] per row)."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return self.ds[i]


def nanogpt_get_batch(path, L, rows, B):
    """nanoGPT's train.py get_batch, verbatim in spirit: memmap per batch, stack x and y."""
    for a in range(0, len(rows) - B + 1, B):
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = rows[a:a + B] * L
        x = torch.stack([torch.from_numpy(data[i:i + L].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + L].astype(np.int64)) for i in ix])
        yield x, y


# --------------------------------------------------------------------------


class Synthetic(Dataset):
    """A batch of zeros as ``how``: several tensors, one tensor, or views of one shared block."""

    def __init__(self, how: str, B: int, L: int):
        self.how, self.B, self.L = how, B, L

    def __len__(self):
        return 1 << 30

    def __getitems__(self, idx):
        B, L = self.B, self.L
        if self.how == "5 tensors":
            return {k: torch.zeros(B, L, dtype=torch.int64) for k in "abcde"}
        if self.how == "2 tensors":
            return {k: torch.zeros(B, L, dtype=torch.int64) for k in "ab"}
        if self.how == "1 tensor":
            return torch.zeros(5, B, L, dtype=torch.int64)
        block = torch.empty(0, dtype=torch.int64).set_(torch.UntypedStorage._new_shared(5 * B * L * 8)).view(5, B, L)
        return dict(zip("abcde", block.unbind(0)))  # "5 views of 1 shared block"


def ipc(B: int, L: int, n: int = 200) -> None:
    """Wall time per batch for a worker to hand a batch of 5 x (B, L) int64 to the main process."""
    print(f"worker -> main process, one worker, batch of 5 x ({B}, {L}) int64:")
    for how in ("5 tensors", "2 tensors", "1 tensor", "5 views of 1 shared block"):
        it = iter(DataLoader(Synthetic(how, B, L), batch_size=B, collate_fn=lambda x: x, num_workers=1))
        next(it)
        t = time.perf_counter()
        for _ in range(n):
            next(it)
        print(f"  {how}: {(time.perf_counter() - t) / n * 1e3:.2f} ms per batch")


def ensure_build(path: str) -> None:
    if os.path.exists(os.path.join(path, "manifest.json")):
        return
    src = need_real()
    print(f"building {path} from {src} (GPT-2 tokenizer, seq_len 2048, 8 MB units)", flush=True)
    subprocess.run(["packer", "build", src, path, "--seq-len", "2048", "--tokenizer", GPT2, "--unit-mb", "8", "-q"], check=True)


def write_bin(ds: PackedDataset, path: str) -> None:
    """The build's input_ids, flat, as nanoGPT's prepare.py writes them (plus one slot for y's last token)."""
    if os.path.exists(path) and os.path.getsize(path) == (len(ds) * ds.seq_len + 1) * 2:
        return
    with open(path + ".tmp", "wb") as f:
        for a in range(0, len(ds), 512):
            b = ds.batch(range(a, min(a + 512, len(ds))))
            f.write(b["input_ids"].numpy().astype(np.uint16).tobytes())
        f.write(np.zeros(1, np.uint16).tobytes())
    os.replace(path + ".tmp", path)


def interleaved(variants: dict, n_items: int, chunk: int, rounds: int, clock) -> dict:
    """Items/s of each variant, timed in alternating chunks so that load on the machine
    hits every variant alike. ``variants[name]()`` returns a zero-argument callable that
    produces the next item; ``clock`` is time.perf_counter (wall) or time.thread_time
    (this thread's CPU time). Returns {name: [items/s of each round]}."""
    take = {name: make() for name, make in variants.items()}
    for f in take.values():
        f()  # warm: workers started, first batch out
    out = {name: [] for name in variants}
    per_round = max(1, n_items // rounds)
    names = list(take)
    for _ in range(rounds):
        spent = dict.fromkeys(variants, 0.0)
        for c in range(max(1, per_round // chunk)):
            for name in names[c % len(names):] + names[:c % len(names)]:  # rotate who goes first
                f = take[name]
                t = clock()
                for _ in range(chunk):
                    f()
                spent[name] += clock() - t
        for name in variants:
            out[name].append(max(1, per_round // chunk) * chunk / spent[name])
    return out


def cycle_rows(rows):
    it = iter(rows * 1000)
    return lambda: next(it)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="bench_out/loader/real_2048")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--batches", type=int, default=200, help="timed batches per DataLoader variant and round")
    p.add_argument("--rows", type=int, default=3000, help="timed rows per random-access variant and round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--loaders", nargs="+", default=["packed", "packed, per-row", "nanoGPT", "memcpy", "nanoGPT get_batch"],
                   help="DataLoader variants to run (nanoGPT is needed for the ratios)")
    p.add_argument("--gpu-tokens-per-s", type=float, default=0.4e6)
    p.add_argument("--out", default="bench_out/loader/results.json")
    p.add_argument("--ipc", action="store_true", help="only time how a worker hands batches over (synthetic)")
    p.add_argument("--verify", action="store_true",
                   help="only: one epoch of --build per round from a fresh PackedDataset, verify=False against the "
                        "default (each shard hashed in a thread at its first read), side by side, wall time")
    return p


class _Sources:
    """The build, the same input_ids as nanoGPT's tokens.bin, and one random order of the rows."""

    def __init__(self, build: str):
        ensure_build(build)
        self.ds = ds = PackedDataset(build)
        self.L = L = ds.seq_len
        self.bin = os.path.join(os.path.dirname(os.path.abspath(build)), os.path.basename(build.rstrip("/")) + ".tokens.bin")
        write_bin(ds, self.bin)
        self.nano, self.memcpy = NanoRows(self.bin, L), MemcpyRows(self.bin, L)
        assert len(self.nano) == len(ds)
        for a in range(0, len(ds), 1024):  # same bytes, and all of them in the page cache
            np.testing.assert_array_equal(self.nano.__getitem__(a)[0].numpy(), ds[a]["input_ids"].numpy())
        self.rows = np.random.default_rng(0).permutation(len(ds))
        print(f"build {build}: {len(ds)} rows x {L}, {len(ds.shard_paths)} shards, {os.cpu_count()} CPUs; "
              f"torch {torch.__version__}", flush=True)

    def rows_of(self, j: int, V: int) -> list[int]:
        """The j-th of V variants reads rows[j::V], so that none reads rows another has just pulled into
        the CPU caches: every read is a first read, as in an epoch over a real corpus."""
        return self.rows[j::V].tolist() * 50

    def random_variants(self) -> dict:
        buf = np.empty(self.L, np.uint16)
        mm = np.memmap(self.bin, dtype=np.uint16, mode="r")
        L = self.L

        def memcpy_row(i):
            np.copyto(buf, mm[i * L:(i + 1) * L])

        def variant(fn, j):
            def make():
                nxt = cycle_rows(self.rows_of(j, 3))
                return lambda: fn(nxt())
            return make

        return {"packed ds[i]": variant(lambda i: self.ds[i], 0), "nanoGPT row": variant(self.nano.__getitem__, 1),
                "memcpy row": variant(memcpy_row, 2)}

    def loaders(self, B: int, w: int, wanted: list[str]) -> dict:
        def loader(make_dl):
            def make():
                it = iter(make_dl())
                return lambda: next(it)
            return make

        def get_batch():
            g = nanogpt_get_batch(self.bin, self.L, np.array(self.rows_of(4, 5)), B)
            return lambda: next(g)

        ds, r = self.ds, self.rows_of
        group = {
            "packed": loader(lambda: DataLoader(ds, B, sampler=r(0, 5), collate_fn=collate, num_workers=w)),
            "packed, per-row": loader(lambda: DataLoader(PerRow(ds), B, sampler=r(1, 5), collate_fn=collate,
                                                         num_workers=w)),
            "nanoGPT": loader(lambda: DataLoader(self.nano, B, sampler=r(2, 5), num_workers=w)),
            "memcpy": loader(lambda: DataLoader(self.memcpy, B, sampler=r(3, 5), num_workers=w)),
        }
        if w == 0:
            group["nanoGPT get_batch"] = get_batch
        return {k: v for k, v in group.items() if k in wanted}


def _measure(args, src: _Sources) -> dict:
    """Rows/s per round of every variant: random access, then the DataLoaders at each worker count."""
    B, times = args.batch, {}
    for name, v in interleaved(src.random_variants(), args.rows * args.rounds, 20, args.rounds, time.thread_time).items():
        times[("random", name)] = v
    print("random access done", flush=True)
    for w in args.workers:
        # One process: its CPU time, which other processes' load barely touches. With
        # workers the work is elsewhere and the main process waits: wall time.
        clock = time.thread_time if w == 0 else time.perf_counter
        for name, v in interleaved(src.loaders(B, w, args.loaders), args.batches * args.rounds, 2, args.rounds, clock).items():
            times[("loader", name, w)] = [x * B for x in v]  # batches/s -> rows/s
        print(f"DataLoader, {w} workers done", flush=True)
    return times


# Bytes handed to the trainer per token: what each variant returns.
OUT_BYTES = {"packed ds[i]": 24, "nanoGPT row": 16, "memcpy row": 2, "packed": 28, "packed, per-row": 28,
             "nanoGPT": 16, "nanoGPT get_batch": 16, "memcpy": 2}


def _table(times: dict, L: int, B: int, gpu: float) -> tuple[str, dict, dict]:
    """The Markdown table; the median rows/s and the ratio to nanoGPT of each variant."""
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = ["| access | variant | workers | rows/s | tokens/s | bytes out/token | x nanoGPT | x H200 need |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]

    def ratio(k, ref):  # median of the per-round ratios: rounds pair the variants in time
        return statistics.median(a / b for a, b in zip(times[k], times[ref]))

    ratios = {}
    for k, v in med.items():
        if k[0] == "random":
            ratios[k] = r = ratio(k, ("random", "nanoGPT row"))
            lines.append(f"| ds[i], random | {k[1]} | - | {v:,.0f} | {v * L / 1e6:,.1f}M | {OUT_BYTES[k[1]]} | {r:.2f} | {v * L / gpu:,.0f} |")
    for k, v in med.items():
        if k[0] == "loader":
            ratios[k] = r = ratio(k, ("loader", "nanoGPT", k[2]))
            lines.append(f"| DataLoader {B}x{L} | {k[1]} | {k[2]} | {v:,.0f} | {v * L / 1e6:,.1f}M | {OUT_BYTES[k[1]]} | {r:.2f} | {v * L / gpu:,.0f} |")
    return "\n".join(lines), med, ratios


def verify_cost(args) -> None:
    """Rows/s of an epoch over ``args.build`` (random order, batches of ``args.batch``, packer.collate) from a
    fresh PackedDataset with ``verify=False`` and with the default background hash, in alternating chunks of
    2 batches, wall time (the hash runs in another thread); per worker count, the median over the rounds of
    the ratio background / verify=False. Every shard is hashed during the timed epoch (first read of each)."""
    rows = np.random.default_rng(0).permutation(len(PackedDataset(args.build, verify=False))).tolist()
    n = len(rows) // args.batch - 1
    print(f"build {args.build}: {len(rows)} rows, {os.cpu_count()} CPUs; {n} batches of {args.batch} per epoch")
    for w in args.workers:
        ratios, both = [], {"verify=False": [], "background": []}
        for _ in range(args.rounds):
            def variant(v):
                return lambda: (lambda it: lambda: next(it))(iter(DataLoader(
                    PackedDataset(args.build, verify=v), args.batch, sampler=rows, collate_fn=collate, num_workers=w)))
            got = interleaved({"verify=False": variant(False), "background": variant("background")}, n, 2, 1,
                              time.perf_counter)
            for k in both:
                both[k].append(got[k][0] * args.batch)
            ratios.append(got["background"][0] / got["verify=False"][0])
        print(f"workers {w}: verify=False {statistics.median(both['verify=False']):,.0f} rows/s, background "
              f"{statistics.median(both['background']):,.0f} rows/s; background / verify=False: median "
              f"{statistics.median(ratios):.3f} (rounds: {', '.join(f'{r:.3f}' for r in ratios)})", flush=True)


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.ipc:
        return ipc(args.batch, 2048)
    if args.verify:
        return verify_cost(args)
    src = _Sources(args.build)
    times = _measure(args, src)
    gpu, L, B = args.gpu_tokens_per_s, src.L, args.batch
    table, med, ratios = _table(times, L, B, gpu)
    print()
    print(table)

    def keyed(d):
        return {" / ".join(map(str, k)): v for k, v in d.items()}

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"build": args.build, "seq_len": L, "batch": B, "rows": len(src.ds), "cpus": os.cpu_count(),
                   "gpu_tokens_per_s": gpu, "median_rows_per_s": keyed(med), "ratio_to_nanogpt": keyed(ratios),
                   "rows_per_s_by_round": keyed(times), "min_max_rows_per_s": keyed({k: (min(v), max(v)) for k, v in times.items()}),
                   "table": table}, f, indent=1)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
