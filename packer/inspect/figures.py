"""The figures of a checked build: the ``--json`` document (docs/stats.md), its table, the build summary, the plot."""

from __future__ import annotations

import json
import os
import textwrap

import numpy as np

from ..errors import PackerError
from . import loss_mask
from .report import STATS_VERSION, PERCENTILES, Report

# --------------------------------------------------------------------------
# Figures: one dict (the --json document) and a table made from it.


def figures(rep: Report) -> dict:
    """The statistics as plain JSON types; the schema is docs/stats.md.
    Longer than 60 lines: the --json document's keys in order (docs/stats.md is its schema).
    """
    m = rep.manifest
    t = m.get("totals", {})
    seq_len = m["seq_len"]
    log = rep.shards  # sums over the shards measured (a ShardLog: the rows themselves are spooled)
    complete = log.measured == log.n

    def total(k):  # measured when every shard was read, else the manifest's figure
        return log.sums[k] if complete else t.get(k)

    rows = total("rows")
    slots = rows * seq_len if rows is not None else None
    padding = total("padding")
    rt = rep.row_tokens if rep.row_tokens is not None else np.zeros(1, np.int64)  # rt[k]: rows of k tokens
    nrows = int(rt.sum())
    fill_pct = np.arange(len(rt)) * 100.0 / seq_len
    ppr = rep.pieces_per_row
    dl = rep.doc_lengths
    skipped = t.get("skipped", {})
    return {
        "stats_version": STATS_VERSION,
        "build": rep.out,
        "verified": rep.deep,
        "ok": rep.ok,
        "problems": [{"path": p.path, "kind": p.kind, "message": p.message} for p in rep.problems],
        "measured_from": "shards" if complete else "manifest",
        "shards_measured": log.measured,
        "seq_len": seq_len,
        "dtype": m["dtype"],
        "tokenizer": m["tokenizer"],
        "settings": m.get("settings", {}),
        "documents": total("documents"),
        "tokens": total("tokens"),
        "rows": rows,
        "slots": slots,
        "padding": padding,
        "padding_pct": round(100.0 * padding / slots, 4) if slots else 0.0,
        "pieces": total("pieces"),
        "documents_split": total("documents_split"),
        "pieces_per_row": {
            "mean": round(float((np.arange(len(ppr)) * ppr).sum() / nrows), 4) if nrows else None,
            "max": int(np.nonzero(ppr)[0][-1]) if ppr.any() else None,
            "histogram": {str(k): int(v) for k, v in enumerate(ppr) if v},
        },
        "row_fill": {
            "full_rows": int(rt[seq_len]) if len(rt) > seq_len else 0,
            "mean_pct": round(float((fill_pct * rt).sum() / nrows), 4) if nrows else None,
            "min_pct": round(float(fill_pct[np.nonzero(rt)[0][0]]), 4) if nrows else None,
            "histogram_pct": _fill_histogram(rt, seq_len),
        },
        "doc_length": {
            "exact": True,
            "documents": dl.n,
            "min": int(dl.values[0]) if dl.n else None,
            "mean": round(dl.mean(), 2) if dl.n else None,
            **{f"p{p}": dl.percentile(p) for p in PERCENTILES},
            "max": int(dl.values[-1]) if dl.n else None,
        },
        **loss_mask.figures(m, rep.shards),
        "holdout": m.get("holdout"),
        "skipped": dict(skipped),
        "skipped_total": int(sum(skipped.values())),
        "skipped_examples": t.get("skipped_examples", {}),
        "tokens_per_shard": {
            "min": log.tokens_min,
            "mean": round(log.sums["tokens"] / log.measured, 1) if log.measured else None,
            "max": log.tokens_max,
        },
        "shards": ShardRows(log),
    }


class ShardRows:
    """The --json "shards" list: read back from the report's spool when iterated (``json_chunks``
    writes it out; ``list()`` of it gives the dicts)."""

    def __init__(self, log):
        self.log = log

    def __len__(self) -> int:
        return len(self.log)

    def __iter__(self):
        return ({k: getattr(s, k) for k in self.log.ROW} for s in self.log)

    def __eq__(self, other) -> bool:
        return isinstance(other, (ShardRows, list)) and len(self) == len(other) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"ShardRows({len(self)} shards)"


def _fill_histogram(rt: np.ndarray, seq_len: int) -> dict:
    """Rows by fill, in 10% bins: "90-100" holds fills in [90%, 100%); "100" full rows."""
    out = {}
    if not rt.any():
        return out
    k = np.arange(len(rt))
    bins = np.minimum(k * 10 // seq_len, 10)
    counts = np.bincount(bins, weights=rt, minlength=11).astype(np.int64)
    for b in range(10):
        out[f"{b * 10}-{b * 10 + 10}"] = int(counts[b])
    out["100"] = int(counts[10])
    return out


def table_lines(fig: dict) -> list[str]:
    """A readable table of ``figures()``."""
    tok = fig["tokenizer"]
    st = fig["settings"]
    dl = fig["doc_length"]
    tps = fig["tokens_per_shard"]
    pr = fig["pieces_per_row"]
    rf = fig["row_fill"]

    def n(x):
        return "-" if x is None else f"{x:,}"

    eos = _eos(tok)
    lines = [
        f"documents        {n(fig['documents'])}",
        f"tokens           {n(fig['tokens'])}",
        f"rows             {n(fig['rows'])} x {fig['seq_len']} ({fig['dtype']})",
        f"padding          {n(fig['padding'])} slots ({fig['padding_pct']:.3f}%)",
        f"documents split  {n(fig['documents_split'])}",
        *([f"trained tokens   {n(fig['trained_tokens'])} ({fig['trained_pct']}% of tokens: the loss_mask)"]
          if "trained_tokens" in fig else []),
        f"pieces per row   mean {pr['mean']}, max {pr['max']}" if pr["mean"] is not None else "pieces per row   -",
        f"row fill         mean {rf['mean_pct']}%, min {rf['min_pct']}%, {n(rf['full_rows'])} rows full"
        if rf["mean_pct"] is not None else "row fill         -",
        f"doc length       p50 {n(dl['p50'])}  p90 {n(dl['p90'])}  p99 {n(dl['p99'])}  max {n(dl['max'])} tokens (exact)",
        f"shards           {len(fig['shards'])}, tokens per shard min {n(tps['min'])} / mean {n(tps['mean'])} / max {n(tps['max'])}",
        f"tokenizer        {tok['name']} ({tok['kind']}, vocab {tok['vocab_size']}, {eos}, pad {tok['pad_id']})",
    ]
    if st:
        lines.append(f"settings         pack {st.get('pack')}, eos {st.get('eos')}, text_field {st.get('text_field')}, "
                     f"unit_bytes {n(st.get('unit_bytes'))}")
    if fig.get("holdout"):
        h = fig["holdout"]
        lines.append(f"holdout          {n(h.get('documents'))} documents, {n(h.get('tokens'))} tokens, {n(h.get('rows'))} rows "
                     f"in {h.get('path')}/ (fraction {h.get('fraction')})")
    if fig["skipped_total"]:
        lines.append(f"skipped          {fig['skipped_total']:,} record(s):")
        width = max(15, *map(len, fig["skipped"]))
        for reason, k in fig["skipped"].items():
            ex = ", ".join(fig["skipped_examples"].get(reason, [])[:3])
            lines.append(f"  {reason:<{width}}{k:>8,}   e.g. {ex}")
    else:
        lines.append("skipped          0 records")
    if fig["measured_from"] == "manifest":
        lines.append("note             some shards could not be read: totals are the manifest's")
    return lines


def _eos(tok: dict) -> str:
    """How the build and stats both name the end-of-document token: "eos 2", or "no EOS"."""
    return "no EOS" if tok.get("eos_id") is None else f"eos {tok['eos_id']}"


def summary_lines(m: dict) -> list[str]:
    """The manifest's own figures (the end-of-build summary; nothing is read)."""
    t = m["totals"]
    tok = m["tokenizer"]
    lines = [
        f"documents       {t['documents']:,}",
        f"tokens          {t['tokens']:,}",
        f"rows            {t['rows']:,} x {m['seq_len']} ({m['dtype']})",
        f"padding         {t['padding']:,} slots ({t['padding_pct']:.3f}%)",
        f"documents split {t['documents_split']:,}",
        *([f"trained tokens  {t['trained_tokens']:,} ({t['trained_pct']}% of tokens: the loss_mask)"]
          if "trained_tokens" in t else []),
        *([f"truncated       {t['truncated']:,} conversation(s) cut to seq_len"] if t.get("truncated") else []),
        f"shards          {len(m['shards'])}",
        f"tokenizer       {tok['name']} ({tok['kind']}, vocab {tok['vocab_size']}, {_eos(tok)}, pad {tok['pad_id']})",
    ]
    h = m.get("holdout")
    if h:
        lines.append(f"holdout         {h['documents']:,} documents, {h['tokens']:,} tokens, {h['rows']:,} "
                     f"{'row' if h['rows'] == 1 else 'rows'} in {h['path']}/ (fraction {h['fraction']})")
    skipped = t.get("skipped", {})
    if skipped:
        lines.append(f"skipped         {sum(skipped.values()):,} record(s):")
        width = max(14, *map(len, skipped))  # (chat reasons are longer: template_not_prefix)
        for reason, n in skipped.items():
            ex = ", ".join(t.get("skipped_examples", {}).get(reason, [])[:3])
            lines.append(f"  {reason:<{width}}{n:>8,}   e.g. {ex}")
    else:
        lines.append("skipped         0 records")
    if tok.get("added"):
        lines.append(f"around text     {tok['added']}")
    for key, head in _MET:  # not skipped: encoded, but one token's id in the middle of a document
        met = t.get(key, {})
        if met:
            lines.append(head.format(n=t.get(key + "_documents", sum(met.values()))))  # (older builds: per token)
            for token, n in met.items():
                ex = ", ".join(t.get(key + "_examples", {}).get(token, [])[:3])
                lines.append(f"  {token:<14}{n:>8,}   e.g. {ex}")
    return lines


_MET = (("special_in_text", "special tokens  {n:,} document(s) hold a special token's string, encoded as its special id "
                            "(--split-special-tokens: as plain text):"),
        ("added_in_text", "added tokens    {n:,} document(s) hold an added token's string, encoded as its one id "
                          "(not special: --split-special-tokens keeps it):"))


def to_json(fig: dict) -> str:
    return "".join(json_chunks(fig))


def json_chunks(fig: dict, per: int = 1024):
    """``json.dumps(fig, indent=1)`` in pieces (the "shards" list, its last key, a slice of ``per`` at a
    time), so that printing a million shards' rows holds a slice of them, not a document."""
    shards = fig["shards"]
    head = json.dumps({**fig, "shards": []}, indent=1)
    if not len(shards):
        yield head
        return
    assert head.endswith("[]\n}")
    yield head[:-3] + "\n"
    rows, first = [], True
    for row in shards:
        rows.append(textwrap.indent(json.dumps(row, indent=1), "  "))
        if len(rows) == per:
            yield ("" if first else ",\n") + ",\n".join(rows)
            rows, first = [], False
    yield ("" if first or not rows else ",\n") + ",\n".join(rows) + "\n ]\n}"


# --------------------------------------------------------------------------
# --plot (matplotlib is an optional extra).


def require_matplotlib():
    """Return matplotlib's Figure class, or raise a one-line ``PackerError`` saying how to get it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PackerError("--plot needs matplotlib, which is not installed: pip install 'packer[plot]'") from None
    return Figure


def plot(rep: Report, path: str) -> None:
    """Write a PNG: document lengths (log-log histogram) and rows by fill."""
    Figure = require_matplotlib()
    fig = Figure(figsize=(11, 4), dpi=100)
    a, b = fig.subplots(1, 2)
    dl = rep.doc_lengths
    if dl.n:
        hi = max(2, int(dl.values[-1]))
        bins = np.unique(np.geomspace(1, hi + 1, 60).astype(np.int64))
        a.hist(dl.values, bins=bins, weights=dl.counts, color="#4c72b0")
        for p, style in zip(PERCENTILES, (":", "--", "-.")):
            v = dl.percentile(p)
            a.axvline(v, color="k", linestyle=style, linewidth=1, label=f"p{p} = {v:,}")
        sl = int(rep.manifest.get("seq_len", 0))
        if sl:  # a document longer than this is split across rows
            a.axvline(sl, color="#c44e52", linewidth=1.5, label=f"seq_len = {sl:,}")
        a.set_xscale("log")
        a.set_yscale("log")
        a.legend(fontsize=8)
    a.set_xlabel("document length (tokens, log)")
    a.set_ylabel("documents (log)")
    a.set_title(f"{dl.n:,} documents")
    rt = rep.row_tokens if rep.row_tokens is not None else np.zeros(1, np.int64)
    seq_len = int(rep.manifest["seq_len"])
    if rt.any():
        fill = np.arange(len(rt)) * 100.0 / max(1, seq_len)
        b.hist(fill, bins=np.linspace(0, 100, 51), weights=rt, color="#55a868")
        b.set_yscale("log")
        lowest = float(fill[np.nonzero(rt)[0][0]])  # show the fills there are, not an empty 0-60% axis
        b.set_xlim(max(0.0, np.floor(lowest / 10) * 10 - 2), 101)
    b.set_xlabel(f"row fill (% of {seq_len} slots)")
    b.set_ylabel("rows (log)")
    pad = 100.0 * float(((seq_len - np.arange(len(rt))) * rt).sum()) / max(1, int(rt.sum()) * seq_len)
    b.set_title(f"{int(rt.sum()):,} rows, {pad:.3f}% padding")
    fig.suptitle(os.path.basename(os.path.normpath(rep.out)) + f" (seq_len {seq_len})")
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise PackerError(f"cannot write plot {path}: {e.strerror or e}") from None
