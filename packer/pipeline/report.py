"""What a build says at its end: the all-skipped error, the mostly-skipped warning, the --dry-run plan, the summary JSON.

None of it changes the bytes of a build: it reads the manifest's totals and
the plan.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys

from ..errors import PackerError
from ..formats import record_fields

MOSTLY_SKIPPED = 0.5  # warn when more than this fraction of the records were skipped


def plural(n: int, one: str, many: str | None = None) -> str:
    """ "1 unit", "2 units", "1,024 units" """
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def no_fast_engine_note(backend: str, requested: str) -> list[str]:
    """The note of a build that tiktoken encodes under ``auto`` because fastokens is missing here: it is a
    default dependency only where it ships a wheel (pyproject.toml's markers), so on other platforms the
    build says once why it runs the slower encoder. [] otherwise (also with ``PACKER_FASTOKENS=off``)."""
    if backend != "tiktoken" or requested != "auto" or os.environ.get("PACKER_FASTOKENS") == "off":
        return []
    if importlib.util.find_spec("fastokens") is not None:
        return []
    where = f"{platform.system()} {platform.machine()}".strip()
    return [f"tokenizer backend: tiktoken encodes (the same ids): fastokens, faster, is not installed here ({where}: "
            "it ships no wheel for every platform; pip install 'packer[fast]' builds it from source)"]


def _reasons(skipped: dict) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(skipped.items(), key=lambda kv: -kv[1]))


def _chat(totals: dict) -> bool:
    """A chat build's totals (they count the trained tokens)."""
    return "trained_tokens" in totals


def no_documents_error(totals: dict, slices, text_field: str) -> PackerError:
    """The one-line error for a build that produced no document: what was
    skipped, and which fields (or columns) the records do have."""
    skipped = totals.get("skipped", {})
    n = sum(skipped.values())
    if not n:
        return PackerError("no documents: the inputs hold no records (empty files?); nothing was built")
    msg = f"no documents: all {plural(n, 'record')} were skipped ({_reasons(skipped)})"
    if set(skipped) & {"missing_field", "not_string"}:
        field = ("a chat record needs messages (--messages-field) or prompt and completion" if _chat(totals)
                 else f"--text-field is {text_field!r}")
        fields = record_fields(slices)
        names: dict[str, None] = {}
        for v in fields.values():
            names.update(dict.fromkeys(v))
        if names:
            shown = ", ".join(list(names)[:20]) + (", ..." if len(names) > 20 else "")
            msg += f"; {field}, the records have: {shown} (in {', '.join(list(fields)[:2])})"
        else:
            msg += f"; {field}"
        if "not_string" in skipped and text_field in names:
            msg += f"; {text_field!r} holds no text (a list of chat messages? render it to text first)"
    examples = [e for v in totals.get("skipped_examples", {}).values() for e in v[:1]]
    if examples:
        msg += f"; e.g. {examples[0]}"
    return PackerError(msg + "; nothing was built")


def skipped_warning(totals: dict) -> str | None:
    """A loud line when most records were skipped, else None."""
    skipped = totals.get("skipped", {})
    n = sum(skipped.values())
    docs = totals.get("documents", 0) + totals.get("holdout_documents", 0)
    if n and n > MOSTLY_SKIPPED * (n + docs):
        check = ("check the conversations, --messages-field (or --prompt-field, --completion-field) and the chat "
                 "template (docs/chat.md names each reason)" if _chat(totals) else "check --text-field and the inputs")
        return (f"{100.0 * n / (n + docs):.0f}% of records were skipped ({plural(n, 'record')}: {_reasons(skipped)}); "
                f"{check} before training on this")
    return None


def plan_dict(cfg, found, units, settings, tok, out_state: str) -> dict:
    """What --dry-run prints (and --summary-json writes): files, formats, sizes, units, recorded settings."""
    formats: dict[str, dict] = {}
    for f in found.files:
        g = formats.setdefault(f.format if f.compression is None else f"{f.format} ({f.compression})", {"files": 0, "bytes": 0})
        g["files"] += 1
        g["bytes"] += f.size
    return {
        "dry_run": True,
        "out": cfg.out,
        "out_state": out_state,
        "files": [{"path": f.path, "format": f.format, "compression": f.compression, "bytes": f.size} for f in found.files],
        "formats": formats,
        "input_bytes": sum(f.size for f in found.files),
        "ignored": found.ignored_lines(),
        "units": [{"unit": u.index, "slices": len(u.slices), "bytes": u.weight} for u in units],
        "tokenizer": tok.name,
        "settings": settings,
    }


def plan_lines(plan: dict, max_files: int = 20) -> list[str]:
    """The --dry-run plan as lines for a terminal."""
    files = plan["files"]
    lines = [f"dry run: nothing written; {plan['out']}: {plan['out_state']}",
             f"inputs          {plural(len(files), 'file')}, {plan['input_bytes']:,} bytes"]
    groups = [(name, f"{g['files']:,}", "file" if g["files"] == 1 else "files", f"{g['bytes']:,}")
              for name, g in plan["formats"].items()]
    shown = [(f["path"], f["format"] + (f" ({f['compression']})" if f["compression"] else ""), f"{f['bytes']:,}")
             for f in files[:max_files]]
    # aligned columns: each as wide as its widest cell (numbers right-aligned)
    w = [max((len(r[k]) for r in groups), default=0) for k in range(4)]
    lines += [f"  {a:<{w[0]}}  {n:>{w[1]}} {u:<{w[2]}}  {b:>{w[3]}} bytes" for a, n, u, b in groups]
    w = [max((len(r[k]) for r in shown), default=0) for k in range(3)]
    lines += [f"  {a:<{w[0]}}  {n:<{w[1]}}  {b:>{w[2]}} bytes" for a, n, b in shown]
    if len(files) > max_files:
        lines.append(f"  ... and {len(files) - max_files:,} more")
    for line in plan["ignored"]:
        lines.append(f"ignored         {line}")
    units = plan["units"]
    lines.append(f"units           {plural(len(units), 'unit')} (one shard each), "
                 f"{sum(u['slices'] for u in units):,} slices")
    lines.append("settings        " + json.dumps(plan["settings"]))
    return lines


def summary_dict(result, out: str) -> dict:
    """The end-of-build summary as JSON types (docs/stats.md, "build summary")."""
    m = result.manifest
    return {
        "ok": True,
        "out": out,
        "seconds": round(result.seconds, 3),
        "units_run": result.units_run,
        "units_skipped": result.units_skipped,
        "totals": m.get("totals", {}),
        "holdout": m.get("holdout"),
        "seq_len": m.get("seq_len"),
        "tokenizer": m.get("tokenizer", {}).get("name"),
        "settings": m.get("settings", {}),
        "notes": list(result.notes),
        "warnings": list(result.warnings),
    }


def write_summary(path: str, doc: dict) -> None:
    """Write ``doc`` as JSON to ``path`` ("-": one line on stdout)."""
    text = json.dumps(doc, sort_keys=False)
    if path == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    try:
        with open(path, "w") as f:
            f.write(text + "\n")
    except OSError as e:
        raise PackerError(f"cannot write --summary-json {path}: {e.strerror or e}") from None
