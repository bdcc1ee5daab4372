"""Plot the build-throughput results (the JSON lines the bench scripts append).

    python bench/plot_build.py bench_out/results/build_bench.jsonl bench_out/results/slow_bench.jsonl \
        -o docs/img/build_throughput.png

Left: ``packer build`` tokens/s as a fraction of the HF tokenizer ceiling on the
same cores (wall clock and CPU time), per corpus and worker count; the
dashed line is the 0.95 target. Right: build time from a slow mount against
max(pure read time, pure tokenize time) (the figure over each build bar; the
target is 1.1), and the same build from local disk where the run has it. A black tick on
the left marks the best ratio a build could reach given the start-up floor
(build_bench's ``best_possible_ratio``), where the run has it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("-o", "--out", default="docs/img/build_throughput.png")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    builds, slow = [], []
    for path in args.results:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                (builds if r["bench"] == "build_bench" else slow if r["bench"] == "slow_bench" else []).append(r)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    labels, wall, cpu, best = [], [], [], []
    for r in builds:
        name = os.path.basename(os.path.normpath(r["inputs"][0])) + f" ({r['time'][11:16]})"
        if r["rows"] and r["rows"][0].get("concurrent"):
            name += ", at once"
        for n in sorted({row["workers"] for row in r["rows"]}):
            rows = [x for x in r["rows"] if x["workers"] == n]
            labels.append(f"{name}\n{n} worker{'s' if n > 1 else ''}")
            wall.append(statistics.median(x["ratio"] for x in rows))
            cpu.append(statistics.median(x["cpu_ratio"] for x in rows))
            floors = [x["best_possible_ratio"] for x in rows if "best_possible_ratio" in x]
            best.append(statistics.median(floors) if floors else None)
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], wall, 0.4, label="wall clock")
    ax.bar([x + 0.2 for x in xs], cpu, 0.4, label="CPU time")
    marks = [(x, b) for x, b in zip(xs, best) if b is not None]
    if marks:
        ax.scatter([x - 0.2 for x, _ in marks], [b for _, b in marks], marker="_", s=300, c="k", zorder=3,
                   label="best possible (start-up floor)")
    ax.axhline(0.95, ls="--", c="k", lw=1)
    ax.set_xticks(list(xs), labels, fontsize=7, rotation=35, ha="right")
    ax.set_ylim(0, max(wall + cpu + [1.0]) * 1.08)
    ax.set_ylabel("build tokens/s ÷ HF tokenizer ceiling")
    ax.set_title("packer build vs tokenizing texts in memory")
    ax.legend(loc="lower right", fontsize=8)
    ax = axes[1]
    if slow:
        rows = slow[-1]["rows"]
        labels = [f"{r['layout'].replace(' files', '').replace('one ', '1 ')}\n{r['bandwidth']} ({r['mbps']:.1f} MB/s)"
                  for r in rows]
        xs = range(len(rows))
        local = all("local_build_s" in r for r in rows)
        w = 0.21 if local else 0.27
        off = [-1.5 * w, -0.5 * w, 0.5 * w, 1.5 * w] if local else [-w, 0, w]
        ax.bar([x + off[0] for x in xs], [r["read_s"] for r in rows], w, label="pure read")
        ax.bar([x + off[1] for x in xs], [r["tokenize_s"] for r in rows], w, label="pure tokenize")
        ax.bar([x + off[2] for x in xs], [r["build_s"] for r in rows], w, label="packer build from the mount")
        if local:
            ax.bar([x + off[3] for x in xs], [r["local_build_s"] for r in rows], w, label="packer build from local disk")
        for x, r in zip(xs, rows):
            ax.text(x + off[2], r["build_s"], f"{r['ratio']:.2f}x", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), labels, fontsize=8)
        top = max(max(r["read_s"], r["tokenize_s"], r["build_s"], r.get("local_build_s", 0)) for r in rows)
        ax.set_ylim(0, top * 1.4)  # room for the legend above the bars
        ax.set_ylabel("seconds")
        ax.set_title(f"from a slow mount ({rows[0]['latency_ms']:g} ms per read, {rows[0]['workers']} worker)")
        ax.legend(fontsize=7, ncol=2, loc="upper center")
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
