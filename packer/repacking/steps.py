"""``packer repack``, top to bottom: finished builds in, a build at another sequence length out.

1. **open**: each source build's manifest (and its holdout's), checked; every source must share the
   tokenizer and the ids it gave (else one line);
2. **plan**: one unit per source shard, in source order (a build's shard N is its unit N, so the units are
   the ones a fresh build would have: ``--dry-run`` stops here);
3. **prepare**: the lock on OUT, OUT made ready (``--resume`` / ``--overwrite``, the build's rules), the
   units already finished;
4. **run**: the other units, on worker processes or Ray tasks (run.py);
5. **finish**: the manifests from the unit records (the holdout's first, the build's last).

No tokenizer is loaded and no raw text is read: a repack reads shards at disk speed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace

from .. import shards as S
from ..errors import PackerError
from ..io import Storage, storage_for
from ..pack import MODES
from ..pipeline import OutFlags, Progress, holdout_settings, manifest_of, prepare_holdout, prepare_out
from .run import run_units
from .source import Source, inside, open_source
from .unit import RepackJob, RepackUnit, check_unit_record

MAX_SEQ_LEN = (1 << 31) - 1
ENGINES = ("local", "ray")


@dataclass
class RepackResult:
    manifest: dict
    seconds: float
    units_run: int
    units_skipped: int
    notes: list[str] = field(default_factory=list)
    plan: dict | None = None  # --dry-run: what would be written; nothing was


def repack(inputs, out: str, *, seq_len: int, pack: str | None = None, workers: int = 0, engine: str = "local",
           ray_address: str | None = None, resume: bool = False, overwrite: bool = False, dry_run: bool = False,
           quiet: bool = False, summary_json: str | None = None, progress=None, vocab_size: int | None = None,
           eos_id: int | None = None) -> RepackResult:
    """Pack the documents of finished build(s) ``inputs`` again into rows of ``seq_len`` tokens, into ``out``.

    ``repack("out2048/", "out8192/", seq_len=8192)`` is ``packer repack out2048/ out8192/ --seq-len 8192``.
    The shards equal, byte for byte, those of a fresh ``packer build`` of the same input at ``seq_len`` with
    the same options (a chat build: where no conversation is over the source's length). ``pack``: the packing
    mode (default: the sources'). ``progress``: called as the build's is, progress(done_bytes, docs, tokens,
    units_done, units, total_bytes). Raises ``PackerError`` (one line) for a user mistake or a damaged source.
    """
    if summary_json:
        from ..pipeline import write_summary  # (here: it imports the input formats, which a repack needs not)
    try:
        result = _repack(inputs, out, seq_len, pack, workers, engine, ray_address, resume, overwrite, dry_run,
                         quiet, progress, vocab_size, eos_id)
    except PackerError as e:
        if summary_json:
            write_summary(summary_json, {"ok": False, "out": str(out), "error": str(e)})
        raise
    if summary_json:
        write_summary(summary_json, result.plan if result.plan is not None else summary_of(result, out))
    return result


def summary_of(result: RepackResult, out: str) -> dict:
    """The end-of-repack summary as JSON (``--summary-json``)."""
    t = result.manifest["totals"]
    keys = ("documents", "tokens", "rows", "padding", "padding_pct", "pieces", "documents_split", "skipped")
    return {"ok": True, "out": str(out), "seq_len": result.manifest["seq_len"], "seconds": round(result.seconds, 3),
            "units_run": result.units_run, "units_skipped": result.units_skipped, **{k: t[k] for k in keys},
            "notes": result.notes}


def _check_options(inputs, seq_len, pack, workers, engine) -> list[str]:
    if isinstance(inputs, (str, bytes)) or hasattr(inputs, "__fspath__"):
        inputs = [inputs]
    inputs = [str(p) for p in inputs]
    if not inputs:
        raise PackerError("give at least one finished build to repack, then OUT")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) and not hasattr(seq_len, "__index__"):
        raise PackerError(f"--seq-len takes a whole number of tokens (got {seq_len!r})")
    if not 2 <= int(seq_len) <= MAX_SEQ_LEN:
        raise PackerError(f"--seq-len must be 2 to {MAX_SEQ_LEN} (got {seq_len})")
    if pack is not None and pack not in MODES:
        raise PackerError(f"--pack must be one of {', '.join(MODES)} (got {pack!r})")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise PackerError(f"--workers takes a whole number >= 0 (got {workers!r})")
    if engine not in ENGINES:
        raise PackerError(f"--engine must be one of {', '.join(ENGINES)} (got {engine!r})")
    return inputs


def open_sources(paths: list[str], out: str, vocab_size: int | None = None, eos_id: int | None = None) -> list[Source]:
    """Step 1: every source build, opened and checked to agree with the first."""
    target = storage_for(out)
    sources = []
    for p in paths:
        if storage_for(p) == target:
            raise PackerError(f"OUT {out} is also an input: write the repack to another folder")
        if inside(out, p):
            raise PackerError(f"OUT {out} is inside the build {p}: its files would be ones that build does not name; "
                              "write the repack outside it")
        sources.append(open_source(p, vocab_size, eos_id))
    first = sources[0]
    for s in sources[1:]:
        if s.same_tokens() != first.same_tokens():
            raise PackerError(f"{s.root} was not built with the tokenizer and settings of {first.root} "
                              "(tokenizer, vocabulary, EOS, pad or chat differ): repack builds of one tokenizer together")
        if (s.holdout is None) != (first.holdout is None):
            raise PackerError(f"{(s if s.holdout is None else first).root} has no holdout and "
                              f"{(first if s.holdout is None else s).root} has one: repack them separately")
    return sources


def plan_units(sources: list[Source], held: bool = False) -> list[RepackUnit]:
    """Step 2: a unit per source shard, in source order (of the holdout builds with ``held``)."""
    units = []
    for s in sources:
        s = s.holdout if held else s
        for e in s.manifest["shards"]:
            units.append(RepackUnit(len(units), s.root, s.seq_len, e))
    return units


def recorded_settings(sources: list[Source], seq_len: int, pack: str) -> dict:
    """The settings the new build records: the first source's, at the new length and packing, with what
    it was made from (each source's manifest digest and length) in place of the raw input's plan."""
    first = dict(sources[0].manifest["settings"])
    first.pop("input_plan", None)
    return {**first, "seq_len": seq_len, "pack": pack, "repacked_from": [
        {"build": s.root, "manifest_xxh3_128": s.digest, "seq_len": s.seq_len,
         "input_plan": s.manifest["settings"].get("input_plan")} for s in sources]}


def _repack(inputs, out, seq_len, pack, workers, engine, ray_address, resume, overwrite, dry_run, quiet,
            progress, vocab_size=None, eos_id=None) -> RepackResult:
    t0 = time.perf_counter()
    paths = _check_options(inputs, seq_len, pack, workers, engine)
    out, seq_len = str(out), int(seq_len)
    sources = open_sources(paths, out, vocab_size, eos_id)
    first = sources[0]
    pack = pack or first.manifest["settings"].get("pack", "bfd")
    units = plan_units(sources)
    held_units = plan_units(sources, held=True) if first.holdout is not None else None
    settings = recorded_settings(sources, seq_len, pack)
    job = RepackJob(out, seq_len, pack, first.manifest["pad_id"], first.manifest["dtype"], first.chat,
                    bool(first.manifest["settings"].get("chat", {}).get("truncate")))
    notes = lost_notes(sources, seq_len)
    store = storage_for(out)
    if dry_run:
        return RepackResult({}, time.perf_counter() - t0, 0, 0, notes, plan=_plan(sources, units, held_units, settings))
    lock = store.lock()
    finished = False
    try:
        flags = OutFlags(resume, overwrite)
        if prepare_out(store, flags, settings):
            m = S.read_manifest(store)
            finished = True
            return RepackResult(m, time.perf_counter() - t0, 0, len(units), notes + ["repack was already complete: nothing to do"])
        all_units = units + (held_units or [])
        records = _finished(store, units) if resume else {}
        held_store = None
        if held_units is not None:
            held_store = storage_for(out.rstrip("/") + "/holdout")
            prepare_holdout(held_store, holdout_settings(settings))
            held_records = _finished(held_store, held_units) if resume else {}
        counter = Progress(progress, all_units, [u.index for u in units if u.index in records])
        todo = [u for u in units if u.index not in records]
        records.update((u.index, rec) for u, rec in run_units(todo, job, workers, engine, ray_address, quiet, counter))
        if held_units is not None:
            held_job = replace(job, out=held_store.root)
            held_todo = [u for u in held_units if u.index not in held_records]
            held_records.update((u.index, rec) for u, rec in
                                run_units(held_todo, held_job, workers, engine, ray_address, quiet, counter))
        m = _manifest(sources, job, settings, [records[u.index] for u in units], held=False)
        if held_units is not None:
            hm = _manifest(sources, job, holdout_settings(settings), [held_records[u.index] for u in held_units], held=True)
            m["holdout"] = {**first.manifest["holdout"], **{k: hm["totals"][k] for k in ("documents", "tokens", "rows", "padding")}}
            S.write_manifest(held_store, hm)
        lock.check()
        S.write_manifest(store, m)
        finished = True
        return RepackResult(m, time.perf_counter() - t0, len(todo), len(units) - len(todo), notes)
    finally:
        lock.release(finished)


def _finished(store: Storage, units: list[RepackUnit]) -> dict[int, dict]:
    """{unit index: record} of the units whose record and whole shard are in ``store`` (``--resume``)."""
    sizes = store.list()
    found = {}
    for u in units:
        name = f"{S.UNIT_DIR}/{u.index:06d}.json"
        if name in sizes:
            try:
                rec = json.loads(store.read(name))
            except (OSError, ValueError):
                continue
            if check_unit_record(rec, u, sizes):
                found[u.index] = rec
    return found


def _manifest(sources: list[Source], job: RepackJob, settings: dict, recs: list[dict], held: bool) -> dict:
    """The new build's manifest: its shards, and the sources' input totals and skipped records (records
    skipped when the sources were built are still skipped, and counted)."""
    ms = [(s.holdout if held else s).manifest for s in sources]
    head = {k: ms[0][k] for k in ("pad_id", "eos_id", "vocab_size", "tokenizer")}
    inputs = {k: sum(m["totals"].get(k, 0) for m in ms) for k in ("input_files", "input_bytes", "ignored_files")}
    before: dict = {}  # reason -> (count, examples), as the sources counted them
    for m in ms:
        for reason, n in m["totals"].get("skipped", {}).items():
            count, ex = before.get(reason, (0, []))
            before[reason] = (count + n, ex + m["totals"].get("skipped_examples", {}).get(reason, []))
    return manifest_of(job.seq_len, job.dtype, head, settings, recs, job.chat, inputs, before)


def lost_notes(sources: list[Source], seq_len: int) -> list[str]:
    """What a repack cannot give back that a rebuild at ``seq_len`` would: conversations the source skipped
    as too long for its length, or cut to it (``--truncate``), where the new length could hold more."""
    notes = []
    for s in sources:
        if not s.chat or seq_len <= s.seq_len:
            continue
        t = s.manifest["totals"]
        long, cut = t.get("skipped", {}).get("too_long", 0), t.get("truncated", 0)
        if long:
            notes.append(f"{s.root}: {long:,} conversation(s) were skipped as longer than its seq_len {s.seq_len:,} "
                         f"when it was built; a repack cannot bring them back, a rebuild at {seq_len:,} would keep "
                         "those that fit")
        if cut:
            notes.append(f"{s.root}: {cut:,} conversation(s) were cut to {s.seq_len:,} tokens (--truncate) when it "
                         f"was built; a repack keeps them cut, a rebuild at {seq_len:,} would keep more of them")
    return notes


def _plan(sources, units, held_units, settings) -> dict:
    """What ``--dry-run`` says would be written."""
    return {"dry_run": True, "sources": [{"build": s.root, "seq_len": s.seq_len, "shards": len(s.manifest["shards"]),
                                          "tokens": s.manifest["totals"]["tokens"],
                                          "documents": s.manifest["totals"]["documents"]} for s in sources],
            "units": len(units), "holdout_units": len(held_units or []),
            "bytes": sum(u.weight for u in units + (held_units or [])), "settings": settings}
