"""Packing, side by side: packer's default against the peers' algorithms on the same lengths.

    python bench/pack_bench.py                    # the table (docs/benchmarks.md) + docs/img/pack_bench.png
    python bench/pack_bench.py --curve            # window size vs padding -> docs/img/pack_window.png
    python bench/pack_bench.py --speed            # documents/s: batched vs one-at-a-time best fit, interleaved
    python bench/pack_bench.py --memory           # pack's peak memory vs documents in the window
    python bench/pack_bench.py --profile-build    # share of a real build's time spent in pack

Lengths (tokens per document, EOS included, as the build packs them):

- real: bench_out/real/real.jsonl (documentation, man pages, C headers and
  Python source from this machine) through the GPT-2 tokenizer
  (../shared/data/gpt2-tokenizer.json), cached in bench_out/pack_lengths/.
- web: lognormal with median 600 tokens and sigma 1.0 (mean ~990, which is
  the mean/median ratio of web corpora such as C4), seed 0, 1M documents.

Strategies (each one's layout into fixed rows of seq_len; a row's unused
slots count as padding):

- pad/row: one document per row, padded to seq_len, longer ones truncated.
- pad/batch8: batches of 8 documents in corpus order, each padded to its
  longest (at most seq_len; longer ones truncated).
- concat: concatenate and cut every seq_len tokens (Megatron, datatrove,
  litdata, MosaicML).
- FFD: first-fit decreasing over the whole set (long documents split into
  ceil(len / seq_len) pieces), a Python segment tree over rows.
- TRL bfd / bfd_split: best fit decreasing within map batches of 1,000
  documents (TRL's default batch), a Python segment tree over free space as
  in TRL and OLMo-core; ``bfd`` truncates long documents, ``bfd_split`` cuts
  them into seq_len fragments.
- BFD whole set: the same one-item-at-a-time segment tree, over everything
  (OLMo-core's OBFD without its power-of-two length and per-file grouping).
- packer bfd, no repair: packer's batched best fit alone.
- packer (default): ``pack(lengths, seq_len)``: best fit decreasing + repair,
  in windows of at most ~2^27 tokens (so the 1M-document set is 8 windows).

Documents per second are for this file's implementation of each strategy,
best of ``--repeat`` runs; the machine is shared, so read the ratio column
(packer default time / strategy time, measured in the same run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from common import GPT2, REAL, REPO  # bench/common.py
from pack_strategies import P, STRATEGIES, items, seg_bfd_rows  # bench/pack_strategies.py
from packer.pack import pack

CACHE = os.path.join(REPO, "bench_out", "pack_lengths")
IMG = os.path.join(REPO, "docs", "img")


# --------------------------------------------------------------------------
# Lengths.


def real_lengths() -> np.ndarray:
    """GPT-2 lengths (EOS included) of bench_out/real/real.jsonl, tokenized once and cached."""
    cache = os.path.join(CACHE, "real_gpt2.npy")
    if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(REAL):
        return np.load(cache)
    import orjson

    from packer.tokenize import Encoder, choose_backend, resolve_tokenizer

    with open(REAL, "rb") as f:
        texts = [orjson.loads(line)["text"] for line in f if line.strip()]
    enc = Encoder(choose_backend(resolve_tokenizer(os.path.abspath(GPT2)), "hf"))
    lengths = np.concatenate([enc.encode_flat(texts[i : i + 256])[1] for i in range(0, len(texts), 256)])
    os.makedirs(CACHE, exist_ok=True)
    np.save(cache, lengths)
    return lengths


def web_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Lognormal, median 600 tokens, sigma 1.0; at least 2 tokens (one plus EOS)."""
    rng = np.random.default_rng(seed)
    return np.maximum(2, np.rint(rng.lognormal(np.log(600), 1.0, n))).astype(np.int64)


def metrics(L: np.ndarray, S: int, r: dict) -> dict:
    k = r["pieces"]
    fit, long = L <= S, L > S
    return {
        "padding_pct": 100 * (r["slots"] - r["tokens"]) / r["slots"],
        "fitting_docs": int(fit.sum()),
        "split_fitting": int((k[fit] > 1).sum()),
        "truncated_pct": 100 * r["truncated"] / int(L.sum()),
        "pieces_per_long": float(k[long].mean()) if long.any() else float("nan"),
        "rows": r["slots"] // S,
    }


def timed(fn, L, S, repeat):
    best, out = float("inf"), None
    for i in range(repeat):
        t = time.perf_counter()
        out = fn(L, S)
        dt = time.perf_counter() - t
        best = min(best, dt)
        if dt > 3:  # slow strategies: once is enough
            break
    return best, out


def table(datasets, seq_lens, repeat) -> list[dict]:
    results = []
    for name, L in datasets:
        for S in seq_lens:
            lower = -(-int(L.sum()) // S)
            bound = 100 * (lower * S - int(L.sum())) / (lower * S)
            print(f"\n### {name}: {len(L):,} documents, {int(L.sum()):,} tokens, seq_len {S}: "
                  f"{int((L > S).sum()):,} longer than a row; fewest pieces per long document "
                  f"{np.mean(-(-L[L > S] // S)) if (L > S).any() else float('nan'):.3f}; "
                  f"lowest possible padding {bound:.4f}% (ceil(tokens / seq_len) rows)\n")
            print("| strategy | padding % | fitting docs split | tokens truncated % | pieces per long doc | docs/s | time vs packer |")
            print("|---|---|---|---|---|---|---|")
            rows = []
            for label, fn in STRATEGIES:
                t, r = timed(fn, L, S, repeat)
                rows.append((label, t, metrics(L, S, r)))
            t_ref = rows[-1][1]
            for label, t, m in rows:
                print(f"| {label} | {m['padding_pct']:.4f} | {m['split_fitting']:,} | {m['truncated_pct']:.2f} | "
                      f"{m['pieces_per_long']:.3f} | {len(L) / t:,.0f} | {t / t_ref:.2f} |")
                results.append({"dataset": name, "seq_len": S, "docs": len(L), "tokens": int(L.sum()),
                                "strategy": label.strip("*"), "seconds": t, "docs_per_s": len(L) / t,
                                "bound_pct": bound, **m})
            sys.stdout.flush()
    return results


def plot_table(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["dataset"] for r in results))
    seq_lens = sorted({r["seq_len"] for r in results})
    fig, axes = plt.subplots(len(seq_lens), len(names), figsize=(3.6 * len(names), 2.9 * len(seq_lens)),
                             sharey=True, squeeze=False)
    labels = [s[0].strip("*") for s in STRATEGIES]
    for (i, S), (j, name) in ((a, b) for a in enumerate(seq_lens) for b in enumerate(names)):
        ax = axes[i, j]
        rs = {r["strategy"]: r for r in results if r["dataset"] == name and r["seq_len"] == S}
        vals = [max(rs[lab]["padding_pct"], 1e-4) for lab in labels]
        colors = ["#c44" if lab.startswith("packer (default)") else "#999" for lab in labels]
        ax.barh(range(len(labels)), vals, color=colors)
        for y, lab in enumerate(labels):  # what each strategy pays instead of padding
            r, note = rs[lab], []
            if r["split_fitting"]:
                note.append(f"{100 * r['split_fitting'] / max(1, r['fitting_docs']):.0f}% of fitting docs split")
            if r["truncated_pct"] > 0:
                note.append(f"{r['truncated_pct']:.0f}% of tokens cut")
            if note:
                inside = vals[y] > 1
                ax.text(vals[y] / 1.2 if inside else vals[y] * 1.2, y, ", ".join(note), va="center",
                        ha="right" if inside else "left", fontsize=6, color="w" if inside else "k")
        ax.axvline(max(rs[labels[-1]]["bound_pct"], 1e-4), color="k", ls=":", lw=1, label="lowest possible")
        ax.set_xscale("log")
        ax.set_xlim(right=200)
        ax.set_title(f"{name}, seq_len {S}", fontsize=8)
        ax.tick_params(labelsize=7)
        if i == len(seq_lens) - 1:
            ax.set_xlabel("padding % of slots (log)", fontsize=8)
    for i in range(len(seq_lens)):
        axes[i, 0].set_yticks(range(len(labels)))
        axes[i, 0].set_yticklabels(labels, fontsize=7)
    axes[0, 0].invert_yaxis()
    axes[0, 0].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"wrote {path}")


# --------------------------------------------------------------------------
# Window size against padding.


def curve(datasets, seq_lens, windows, path):
    out = []
    print("\n| lengths | seq_len | window= | windows | tokens per window | padding %, packer | padding %, no repair | lowest possible % |")
    print("|---|---|---|---|---|---|---|---|")
    for name, L in datasets:
        total = int(L.sum())
        for S in seq_lens:
            for W in windows + [None]:  # None: the whole set as one window
                bounds = P.window_bounds(L, W or total)
                if W is not None and len(bounds) <= 2:
                    continue  # one window: that is the whole-set point
                t = time.perf_counter()
                lay = pack(L, S, window=W)
                dt = time.perf_counter() - t
                plain = P._windowed(lambda x, s: P._bfd(x, s, repair=False), L, S, W or total)
                wt = np.add.reduceat(L, bounds[:-1])  # tokens per window
                lb_slots = int((-(-wt // S)).sum()) * S  # each window needs ceil(its tokens / S) rows
                row = {"dataset": name, "seq_len": S, "window_arg": W, "window": total / len(wt), "windows": len(wt),
                       "padding_pct": 100 * lay.padding / (lay.num_rows * S),
                       "no_repair_pct": 100 * plain.padding / (plain.num_rows * S),
                       "bound_pct": 100 * (lb_slots - total) / lb_slots, "seconds": dt}
                out.append(row)
                print(f"| {name} | {S} | {W or total:,} | {len(wt):,} | {row['window']:,.0f} | {row['padding_pct']:.4f} | "
                      f"{row['no_repair_pct']:.4f} | {row['bound_pct']:.4f} |", flush=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.8), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (name, L) in zip(axes, datasets):
        for S, c in zip(seq_lens, ("C0", "C3", "C2")):
            rs = [r for r in out if r["dataset"] == name and r["seq_len"] == S]
            x = [r["window"] for r in rs]
            ax.plot(x, [max(r["padding_pct"], 1e-5) for r in rs], "o-", color=c, label=f"packer, seq_len {S}")
            ax.plot(x, [max(r["no_repair_pct"], 1e-5) for r in rs], "x--", color=c, alpha=0.6, lw=1,
                    label=f"no repair, {S}")
            ax.plot(x, [max(r["bound_pct"], 1e-5) for r in rs], ":", color=c, lw=1, label=f"lowest possible, {S}")
        ax.axvspan(16e6, 26e6, color="0.85", zorder=0, label="build unit (64 MB of text)")
        ax.axvline(P.DEFAULT_WINDOW, color="0.4", lw=1, ls="-.", label="pack's default window")
        ax.axhline(0.1, color="k", lw=0.6)
        ax.axhline(0.01, color="k", lw=0.6, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens per packing window")
        ax.set_title(f"{name}: {len(L):,} documents, {int(L.sum()) / 1e6:,.0f}M tokens", fontsize=9)
        ax.grid(alpha=0.3, which="both", lw=0.4)
    axes[0].set_ylabel("padding % of slots")
    axes[-1].legend(fontsize=6.5, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"wrote {path}")
    return out


# --------------------------------------------------------------------------
# Memory and the build profile.


def memory(seq_len: int) -> list[dict]:
    import tracemalloc

    out = []
    print("\n| documents | peak bytes in pack | bytes per document |")
    print("|---|---|---|")
    for n in (16_000, 128_000, 1_000_000):
        L = web_lengths(n)
        tracemalloc.start()
        pack(L, seq_len)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out.append({"docs": n, "peak": peak, "per_doc": peak / n})
        print(f"| {n:,} | {peak / 1e6:,.1f} MB | {peak / n:,.0f} |")
    return out


def speed(datasets, seq_lens, rounds) -> list[dict]:
    """Documents per second of the lengths-to-layout step, variants interleaved round by round."""
    import statistics

    variants = [("one item at a time (segment tree)", lambda L, S: seg_bfd_rows(items(L, S)[0].tolist(), S)),
                ("packer bfd, no repair", lambda L, S: P._bfd(L, S, repair=False)),
                ("packer (default)", lambda L, S: pack(L, S))]
    out = []
    print("\n| lengths | documents | seq_len | one item at a time | packer bfd, no repair | packer (default) | "
          "batched / one at a time | default / one at a time |")
    print("|---|---|---|---|---|---|---|---|")
    for name, L in datasets:
        for S in seq_lens:
            times = {v: [] for v, _ in variants}
            for _ in range(rounds):
                for v, fn in variants:
                    t = time.perf_counter()
                    fn(L, S)
                    times[v].append(time.perf_counter() - t)
            med = {v: statistics.median(ts) for v, ts in times.items()}
            dps = {v: len(L) / t for v, t in med.items()}
            a, b, c = (dps[v] for v, _ in variants)
            print(f"| {name} | {len(L):,} | {S} | {a:,.0f} | {b:,.0f} | {c:,.0f} | {b / a:.1f}x | {c / a:.1f}x |", flush=True)
            out.append({"dataset": name, "docs": len(L), "seq_len": S, "docs_per_s": dps})
    return out


def profile_build(seq_len: int, out_dir: str) -> dict:
    """Build bench_out/real/real.jsonl (GPT-2, one worker) under cProfile; pack's share of the time."""
    import cProfile
    import pstats
    import shutil

    from packer import BuildConfig, build

    shutil.rmtree(out_dir, ignore_errors=True)
    cfg = BuildConfig.of(inputs=(REAL,), out=out_dir, seq_len=seq_len, tokenizer=os.path.abspath(GPT2), workers=1, quiet=True)
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.runcall(build, cfg)
    wall = time.perf_counter() - t
    st = pstats.Stats(prof)
    pack_s = sum(v[3] for k, v in st.stats.items() if k[2] == "pack" and k[0].endswith(os.path.join("packer", "pack.py")))
    total = sum(v[3] for k, v in st.stats.items()
                if k[2] == "_build" and k[0].endswith(os.path.join("packer", "build", "__init__.py")))
    res = {"wall_s": wall, "build_s": total, "pack_s": pack_s, "pack_share_pct": 100 * pack_s / total}
    print(f"\nbuild (cProfile) {total:.1f}s, of which pack {pack_s:.3f}s = {res['pack_share_pct']:.2f}%")
    shutil.rmtree(out_dir, ignore_errors=True)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--web-docs", type=int, default=1_000_000)
    ap.add_argument("--unit-docs", type=int, default=16_000, help="web documents in one build unit (~16M tokens)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--curve", action="store_true", help="window size vs padding instead of the table")
    ap.add_argument("--curve-docs", type=int, default=250_000, help="web documents for the curve")
    ap.add_argument("--speed", action="store_true", help="documents/s, variants interleaved over --rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--profile-build", action="store_true")
    ap.add_argument("--json", default=os.path.join(REPO, "bench_out", "pack_bench.json"))
    args = ap.parse_args(argv)
    os.makedirs(IMG, exist_ok=True)
    result = {"bench": "pack_bench", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:]}
    real = real_lengths()
    if args.curve:
        # Real lengths resampled (with replacement, seed 0) to a corpus big enough for large windows.
        big_real = np.random.default_rng(0).choice(real, 20 * len(real))
        windows = [1 << k for k in range(18, 29)]
        result["curve"] = curve([("web", web_lengths(args.curve_docs)), ("real, resampled x20", big_real)],
                                args.seq_len, windows, os.path.join(IMG, "pack_window.png"))
    elif args.speed:
        sets = [("real", real), ("web", web_lengths(16_000, seed=1)), ("web", web_lengths(128_000, seed=2)),
                ("web", web_lengths(1_000_000))]
        result["speed"] = speed(sets, args.seq_len, args.rounds)
    elif args.memory:
        result["memory"] = memory(args.seq_len[0])
    elif args.profile_build:
        result["profile"] = profile_build(args.seq_len[0], os.path.join(REPO, "bench_out", "pack_profile_build"))
    else:
        datasets = [("real", real), ("web, one build unit", web_lengths(args.unit_docs, seed=1)),
                    ("web", web_lengths(args.web_docs))]
        res = table(datasets, args.seq_len, args.repeat)
        result["table"] = res
        plot_table(res, os.path.join(IMG, "pack_bench.png"))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
