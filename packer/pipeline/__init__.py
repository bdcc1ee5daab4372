"""Build: raw text in, verified shards and a manifest out.

The unit of output is a ``Unit`` (plan.py): a few slices of input, about
``unit_bytes`` of it, that become one shard plus a unit record,
deterministically (unit.py). Everything else follows from that:

- parallelism: chunks of a unit are tokenized on any core, units are packed
  as they complete (local.py: worker processes; ray_engine.py: Ray tasks);
- byte-identical output whatever ``--workers`` or the engine: a unit's shard
  depends on its input and the output settings alone;
- crash-resume: a unit whose record and shard exist is finished; ``--resume``
  runs only the others (output.py);
- the manifest is assembled from unit records last, so a build folder with a
  manifest is complete.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace

from .. import faults
from .. import shards as S
from ..errors import PackerError
from ..formats import discover, no_inputs_error, plan_slices
from ..io import storage_for
from ..tokenize import choose_backend, resolve_tokenizer
from ..tokenize.tokenizer import choose_backend_later, with_choice
from .config import DEFAULT_UNIT_BYTES, BuildConfig, OutputSettings, RunSettings
from .local import LocalEngine
from .output import finished_records, holdout_settings, manifest, out_action, prepare_holdout, prepare_out
from .plan import (FirstTask, Unit, input_stamp, limit_slices, plan_units, recorded_settings, sample_slices,
                   sample_texts)
from .report import no_documents_error, plan_dict, skipped_warning, summary_dict, write_summary
from .unit import HOLDOUT_DIR, Job, assemble_unit, check_input, encode_chunk, holdout_out

__all__ = [
    "build", "BuildConfig", "OutputSettings", "RunSettings", "BuildResult", "Unit", "Job", "plan_units",
    "encode_chunk", "assemble_unit", "DEFAULT_UNIT_BYTES",
]


@dataclass
class BuildResult:
    manifest: dict
    seconds: float
    units_run: int
    units_skipped: int
    notes: list[str] = field(default_factory=list)
    added: str = ""  # what each document gets around its text, by string and id ("bos <s> (1) ...; eos </s> (2)")
    phases: dict = field(default_factory=dict)  # seconds per step of the build, in order (bench/tokenizer_bench.py --timeline)
    warnings: list[str] = field(default_factory=list)  # said loudly at the end (most records skipped)
    plan: dict | None = None  # --dry-run: what would be built (packer.pipeline.report.plan_dict); nothing was written


def chat_job(o: OutputSettings, tok):
    """The ChatJob of a chat build: its template (loaded and compiled here, once), fields and rules."""
    from ..formats.chat import ChatFields
    from ..tokenize.chat import load_chat_template
    from ..tokenize.tokenizer import loaded_hf
    from .chat_unit import ChatJob

    if tok.kind != "hf":
        raise PackerError("--chat needs --tokenizer: a folder with tokenizer.json and a chat template")
    specials = [t.content for t in loaded_hf(tok).get_added_tokens_decoder().values() if t.special]
    spec = load_chat_template(o.tokenizer, o.chat_template, specials, o.train_on)
    return ChatJob(spec, ChatFields(o.messages_field, o.prompt_field, o.completion_field), o.truncate)


def engine_for(cfg: BuildConfig):
    """The engine that runs the units: every engine has ``run(todo, job, records, units, progress) -> notes``."""
    if cfg.run.engine == "ray":
        from .ray_engine import RayEngine  # Ray is imported only when asked for

        return RayEngine(cfg.run.workers, cfg.run.ray_address, cfg.run.quiet)
    return LocalEngine(cfg.run.workers)


def build(inputs, out: str | None = None, *, progress=None, on_sized=None, **options) -> BuildResult:
    """Run a build: ``build("corpus/", "out/", seq_len=2048, tokenizer="gpt2/tokenizer.json")``.

    ``inputs``: a path (folder, file, glob, URI) or a list of them, or a whole
    ``BuildConfig``. ``options`` are ``packer build``'s options by the same
    names (seq_len, tokenizer, text_field, pack, no_eos, eos_token, no_bos, bos_token,
    split_special_tokens, unit_mb, max_record_mb, limit, holdout, chat, chat_template, train_on,
    truncate, workers, strict, overwrite, resume, quiet, tokenizer_backend, engine, ray_address,
    dry_run, summary_json), validated the same way. Raises ``PackerError`` (one line) for a user
    mistake, and when the build produced no document at all (naming the fields the records have).
    ``progress`` (optional) is called as progress(done_bytes, docs, tokens, units_done, units,
    total_bytes); ``on_sized`` as on_sized(files_done, files) while input files are sized.
    """
    if isinstance(inputs, BuildConfig):
        if out is not None or options:
            raise PackerError("build(config) takes no other paths or options: they are in the config")
        cfg = inputs
        cfg.validate()
    else:
        if out is None:
            raise PackerError("build() needs the output folder: build(inputs, out, ...)")
        try:
            cfg = BuildConfig.of(inputs, out, **options)
        except PackerError as e:
            if options.get("summary_json"):  # a pipeline reads why, even when the options were refused
                write_summary(options["summary_json"], {"ok": False, "out": str(out), "error": str(e)})
            raise
    try:
        result = _run_build(cfg, progress, on_sized)
    except PackerError as e:
        if cfg.run.summary_json:
            write_summary(cfg.run.summary_json, {"ok": False, "out": cfg.out, "error": str(e)})
        raise
    if cfg.run.summary_json:
        write_summary(cfg.run.summary_json, result.plan if result.plan is not None else summary_dict(result, cfg.out))
    return result


class _Timeline:
    """Seconds per step of a build, in order (``BuildResult.phases``; bench/tokenizer_bench.py --timeline)."""

    def __init__(self, t0: float):
        self.t0 = self.last = t0
        self.phases: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = now - self.last
        self.last = now


def _run_build(cfg: BuildConfig, progress, on_sized) -> BuildResult:
    """Discover and plan (``--limit`` cuts the plan; ``--dry-run`` stops there), then run the units
    under the lock on OUT."""
    phase = _Timeline(time.perf_counter())
    o = cfg.output
    # A chat template writes BOS and the end-of-turn tokens itself: a chat build adds neither.
    tok = resolve_tokenizer(o.tokenizer, o.eos and not o.chat, o.eos_token, o.bos and not o.chat, o.bos_token,
                            o.split_special_tokens)
    phase("load tokenizer")
    chat = chat_job(o, tok) if o.chat else None
    found = discover(list(cfg.inputs), exclude=cfg.out, on_sized=on_sized)
    if not found.files:
        raise no_inputs_error(cfg.inputs, found)
    slices = plan_slices(found.files, o.unit_bytes)
    if o.limit is not None:
        slices = limit_slices(slices, o.limit, o.text_field)
    units = plan_units(slices, o.unit_bytes)
    phase("discover + plan")
    out = storage_for(cfg.out)
    if cfg.run.dry_run:
        settings = recorded_settings(cfg, tok, units, chat)
        plan = plan_dict(cfg, found, units, settings, tok, _out_state(out, cfg, settings))
        return BuildResult({}, time.perf_counter() - phase.t0, 0, 0, list(tok.notes), plan=plan)
    later = None  # the engine check on input texts, when left to a worker (_deferred_check)
    if chat is not None:
        tok = replace(tok, backend="hf", backend_reason="chat build: HF tokenizers, whose offsets place the trained spans")
    elif _defer_check(cfg):
        tok, later = choose_backend_later(tok, cfg.run.tokenizer_backend)
    else:
        tok = choose_backend(tok, cfg.run.tokenizer_backend,
                             lambda: sample_texts([s for u in units for s in u.slices], o.text_field))
    phase("engine check")
    settings = recorded_settings(cfg, tok, units, chat)
    job = Job(cfg.out, o.seq_len, o.pack, o.text_field, cfg.run.strict, tok, S.dtype_for_vocab(tok.vocab_size),
              o.max_record_bytes, chat, float(o.holdout))
    lock = out.lock()  # one build at a time in OUT; says who holds it
    finished = False
    try:
        stamp = input_stamp(found.files)
        already = prepare_out(out, cfg, settings, stamp, lock.previous)
        lock.record(stamp)
        result = _run_units(cfg, tok, job, settings, units, found, out, already, phase, progress, later)
        finished = True
        return result
    finally:
        lock.release(finished)


def _defer_check(cfg: BuildConfig) -> bool:
    """Whether the engine check on input texts runs on a worker while the others start: a local
    build on more than one core. It needs the HF tokenizer, which a build whose tokenizer and check
    are on record would otherwise parse in the main process first (0.5 s for Llama 3, serial)."""
    return cfg.run.engine == "local" and (cfg.run.workers or os.cpu_count() or 1) > 1


class _Fallback(Exception):
    """The deferred input check found a difference: "auto" builds again with HF (nothing was written)."""

    def __init__(self, choice):
        self.choice = choice


def _deferred_check(later, tok, slices, text_field: str, decided: list):
    """The FirstTask of a build whose input check was left to a worker (``choose_backend_later``)."""
    def on_result(r):
        c = later.outcome(r)  # "tiktoken" refused raises PackerError here
        if c.backend != "tiktoken":
            raise _Fallback(c)
        decided.append(with_choice(tok, c))
    return FirstTask(check_input, (sample_slices(list(slices)), text_field), on_result)


def _notes(tok, found) -> list[str]:
    notes = list(tok.notes)
    if found.ignored:
        notes += [f"ignored {line}" for line in found.ignored_lines()]
    if found.duplicates:
        notes.append(f"{len(found.duplicates)} input path(s) named twice were read once, e.g. {found.duplicates[0]}")
    if getattr(found, "special", ()):
        notes.append(f"{len(found.special)} FIFO/device/socket input name(s) were not read (not regular files), "
                     f"e.g. {found.special[0]}")
    return notes


def _run_units(cfg, tok, job, settings, units, found, out, already, phase: _Timeline, progress,
               later=None) -> BuildResult:
    """The units not finished yet, then the manifests (the holdout's first, the build's last).
    ``later``: the engine check on input texts, still to run (``choose_backend_later``)."""
    t0, o = phase.t0, cfg.output
    if already:
        notes = _notes(tok, found)
        return BuildResult(S.read_manifest(out), time.perf_counter() - t0, 0, len(units),
                           notes + ["build was already complete: nothing to do"], tok.added)
    held = storage_for(holdout_out(cfg.out)) if o.holdout else None
    if held is not None:
        prepare_holdout(held, holdout_settings(settings))
    records = finished_records(out, units) if cfg.run.resume else {}
    todo = [u for u in units if u.index not in records]
    phase("prepare output")
    engine_notes = []
    if later is not None:
        decided: list = []
        first = _deferred_check(later, tok, [s for u in units for s in u.slices], o.text_field, decided)
        try:
            if todo:
                engine_notes = engine_for(cfg).run(todo, job, records, units, progress, first)
            else:  # nothing left to build (--resume): the check still decides what the manifest says
                first.run_here(job)
            tok = decided[0]
        except _Fallback as f:  # tiktoken differed on the input: HF encodes everything, from the start
            tok = with_choice(tok, f.choice)
            job = replace(job, tokenizer=tok)
            engine_notes = engine_for(cfg).run(todo, job, records, units, progress) if todo else []
    elif todo:
        engine_notes = engine_for(cfg).run(todo, job, records, units, progress)
    notes = _notes(tok, found) + engine_notes
    phase("units (workers)")

    m = manifest(cfg, tok, job, settings, units, records, found)
    hm = None
    if held is not None:
        h_records = finished_records(held, units)
        if len(h_records) < len(units):
            raise PackerError(f"holdout build {held.root} lacks {len(units) - len(h_records)} unit(s): rerun with --overwrite")
        hm = manifest(cfg, tok, job, holdout_settings(settings), units, h_records, found)
        m["holdout"] = {"path": HOLDOUT_DIR, "fraction": float(o.holdout)} | {
            k: hm["totals"][k] for k in ("documents", "tokens", "rows", "padding")}
    if m["totals"]["documents"] == 0 and (hm is None or hm["totals"]["documents"] == 0):
        raise no_documents_error(m["totals"], [s for u in units for s in u.slices], o.text_field)
    warn = skipped_warning({**m["totals"], "holdout_documents": hm["totals"]["documents"] if hm else 0})
    if hm is not None:
        held.put_json(S.MANIFEST, hm)
    faults.point("manifest")
    out.put_json(S.MANIFEST, m)
    phase("manifest")
    return BuildResult(m, time.perf_counter() - t0, len(todo), len(units) - len(todo), notes, tok.added, phase.phases,
                       [warn] if warn else [])


def _out_state(out, cfg: BuildConfig, settings: dict) -> str:
    """What a real build would do with the output location (for --dry-run), without touching it."""
    try:
        tops = out.tops()
        action = out_action(out.root, tops, cfg, settings, lambda: json.loads(out.read(S.BUILD_JSON)).get("settings", {}))
    except PackerError as e:
        return f"the build would stop: {e}"
    return {"fresh": "would be created" if not tops else "would be built into",
            "continue": "would be resumed", "done": "already holds this build", "replace": "would be replaced"}[action]
