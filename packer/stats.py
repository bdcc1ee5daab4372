"""Stats: verify a build against its manifest and summarise what it holds."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import shards as S
from .errors import ShardError


@dataclass
class Report:
    manifest: dict
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(out: str) -> Report:
    """Check every shard the manifest names; collect one line per problem."""
    m = S.read_manifest(out)
    rep = Report(m)
    for sh in m["shards"]:
        path = os.path.join(out, sh["path"])
        if not os.path.exists(path):
            rep.problems.append(f"{sh['path']}: missing")
            continue
        if os.path.getsize(path) != sh["bytes"]:
            rep.problems.append(f"{sh['path']}: size {os.path.getsize(path)} bytes, manifest says {sh['bytes']} (truncated or replaced)")
            continue
        if S.file_checksum(path) != sh[S.CHECKSUM]:
            rep.problems.append(f"{sh['path']}: checksum mismatch (the file was changed or damaged)")
            continue
        try:
            table = S.open_shard(path, m["seq_len"], m["dtype"])
        except ShardError as e:
            rep.problems.append(str(e))
            continue
        if table.num_rows != sh["rows"]:
            rep.problems.append(f"{sh['path']}: {table.num_rows} rows, manifest says {sh['rows']}")
    return rep


def summary_lines(m: dict) -> list[str]:
    t = m["totals"]
    tok = m["tokenizer"]
    lines = [
        f"documents       {t['documents']:,}",
        f"tokens          {t['tokens']:,}",
        f"rows            {t['rows']:,} x {m['seq_len']} ({m['dtype']})",
        f"padding         {t['padding']:,} slots ({t['padding_pct']:.3f}%)",
        f"documents split {t['documents_split']:,}",
        f"shards          {len(m['shards'])}",
        f"tokenizer       {tok['name']} ({tok['kind']}, vocab {tok['vocab_size']}, eos {tok['eos_id']}, pad {tok['pad_id']})",
    ]
    skipped = t.get("skipped", {})
    if skipped:
        lines.append(f"skipped         {sum(skipped.values()):,} record(s):")
        for reason, n in skipped.items():
            ex = ", ".join(t.get("skipped_examples", {}).get(reason, [])[:3])
            lines.append(f"  {reason:<14}{n:>8,}   e.g. {ex}")
    else:
        lines.append("skipped         0 records")
    return lines
