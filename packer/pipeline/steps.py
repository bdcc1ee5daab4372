"""A build, top to bottom, as named steps: resolve, plan, prepare, run, finish.

``build()`` reads its options into a ``BuildConfig``; then

1. **resolve**: the tokenizer (and a chat build's template);
2. **plan**: discover the inputs and cut them into units (``--limit`` cuts the
   plan; ``--dry-run`` stops after it);
3. **prepare**: choose the tokenizer backend (backend_check.py), take the lock
   on OUT, make OUT ready (``--resume`` / ``--overwrite``, output.py), find the
   units already finished;
4. **run**: the engine builds the other units (engines/);
5. **finish**: the manifests from the unit records (the holdout's first, the
   build's last, so a folder with a manifest is complete).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace

from .. import faults, head_start
from .. import shards as S
from ..errors import PackerError
from ..formats import discover, no_inputs_error, plan_slices
from ..io import Storage, stamp_listing, storage_for
from ..tokenize import TokenizerInfo, resolve_tokenizer
from . import backend_check
from .config import OPTIONS, BuildConfig, OutputSettings, text_suffixes
from .engines import Progress, engine_for
from .options import in_python_terms, signature
from .output import (finished_records, holdout_settings, manifest, out_action, prepare_holdout, prepare_out,
                     remove_temp_files)
from .plan import Unit, content_change, input_change, input_stamp, limit_slices, plan_units, recorded_settings
from .report import no_documents_error, no_fast_engine_note, plan_dict, skipped_warning, summary_dict, write_summary
from .unit import HOLDOUT_DIR, Job, holdout_out


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


def build(inputs, out: str | None = None, *, progress=None, on_sized=None, on_note=None, exit_on_stop: bool = False,
          **options) -> BuildResult:
    """Run a build: ``build("corpus/", "out/", seq_len=2048, tokenizer="gpt2/tokenizer.json")``.

    ``inputs``: a path (folder, file, glob, URI) or a list of them, or a whole
    ``BuildConfig``. ``options`` are ``packer build``'s options by the same
    names (``--unit-mb`` is ``unit_mb``; the signature lists them, typed, with
    their defaults: config.OPTIONS), validated the same way. Raises ``PackerError``
    (one line) for a user mistake, and when the build produced no document at all
    (naming the fields the records have). ``progress`` (optional) is called as
    progress(done_bytes, docs, tokens, units_done, units, total_bytes): once at the start (a resumed build's
    finished units counted done), then as chunks are tokenized and units written, every figure only growing;
    ``done_bytes`` are input bytes whose documents are tokenized, so a rate and an ETA over them are the
    work's. A tqdm bar (anything with ``update`` and ``n``) is driven the same way, over bytes. ``on_sized``
    as on_sized(files_done, files) while input files are sized; ``on_note`` as
    on_note(line) for each of the tokenizer's notes once it is resolved, before any
    input is read (a model folder whose tokenizer.json and transformers disagree);
    they stay in ``notes`` as well. ``exit_on_stop``: the caller ends its process as soon as a
    KeyboardInterrupt (Ctrl-C, or SIGTERM made one) leaves the build, as the ``packer`` command does; what
    that end stops anyway is then left to it (a Ray the build started: its watchdog kills it, where
    ``ray.shutdown()`` took 6 s at load 16). Otherwise the build stops everything it started first.
    """
    try:
        cfg = _config(inputs, out, options)
    except PackerError as e:
        in_python_terms(e, OPTIONS)  # resume=True, not --resume, for a caller in Python (the CLI keeps flags)
        raise
    if progress is not None and not callable(progress) and hasattr(progress, "update"):
        progress = _drive(progress)
    try:
        result = _build(cfg, progress, on_sized, on_note, exit_on_stop)
    except PackerError as e:
        if cfg.run.summary_json:
            write_summary(cfg.run.summary_json, {"ok": False, "out": cfg.out, "error": str(e)})
        in_python_terms(e, OPTIONS)
        raise
    if cfg.run.summary_json:
        write_summary(cfg.run.summary_json, result.plan if result.plan is not None else summary_dict(result, cfg.out))
    return result


build.__signature__ = signature(build, OPTIONS)  # one typed keyword per option, for help() and completion


def _config(inputs, out, options: dict) -> BuildConfig:
    if isinstance(inputs, BuildConfig):
        if out is not None or options:
            raise PackerError("build(config) takes no other paths or options: they are in the config")
        inputs.validate()
        return inputs
    if out is None:
        raise PackerError("build() needs the output folder: build(inputs, out, ...)")
    try:
        return BuildConfig.of(inputs, out, **options)
    except PackerError as e:
        if options.get("summary_json"):  # a pipeline reads why, even when the options were refused
            write_summary(options["summary_json"], {"ok": False, "out": str(out), "error": str(e)})
        raise


class Timeline:
    """Seconds per step of a build, in order (``BuildResult.phases``; bench/tokenizer_bench.py --timeline)."""

    def __init__(self):
        self.t0 = self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = now - self.last
        self.last = now

    def seconds(self) -> float:
        return time.perf_counter() - self.t0


@dataclass(frozen=True)
class Plan:
    """What the build reads: the discovered inputs and the units cut from them."""

    found: object  # formats.Discovered: files, ignored, duplicates, special
    units: list[Unit]


def _drive(bar):
    """A progress callback that moves tqdm bar ``bar`` over the input bytes, the counts beside it."""

    def update(done: int, docs: int, tokens: int, units_done: int, units: int, total: int) -> None:
        bar.total = total
        bar.set_postfix_str(f"{docs:,} docs, {tokens:,} tokens, units {units_done}/{units}", refresh=False)
        bar.update(done - bar.n)

    return update


def _build(cfg: BuildConfig, progress, on_sized, on_note=None, exit_on_stop: bool = False) -> BuildResult:
    phase = Timeline()
    early: list[Plan] = []

    def while_waiting(file_tok: TokenizerInfo) -> None:
        # transformers' view of a model folder is being built in a child (a first build): plan the
        # inputs, and check the backend of tokenizer.json meanwhile, which most folders then use as it is
        early.append(plan_inputs(cfg, on_sized))
        if not cfg.run.dry_run and not cfg.output.chat:
            backend_check.prefetch(cfg, file_tok, early[0].units)

    tok, chat = resolve(cfg.output, while_waiting)
    for note in tok.notes if on_note else ():  # said at the start: what the tokenizer is, before any unit runs
        on_note(note)
    phase("load tokenizer")
    plan = early[0] if early else plan_inputs(cfg, on_sized)
    phase("discover + plan")
    out = storage_for(cfg.out)
    if chat is not None and cfg.run.resume:  # the date a strftime_now template saw in the killed build
        from .chat_unit import resumed

        chat = resumed(chat, out)
    if cfg.run.dry_run:
        settings = recorded_settings(cfg, tok, plan.units, chat)
        state = _out_state(out, cfg, settings)
        return BuildResult({}, phase.seconds(), 0, 0, _tokenizer_notes(cfg, tok), plan=plan_dict(cfg, plan.found, plan.units,
                                                                                       settings, tok, state))
    tok, check = backend_check.decide(cfg, tok, plan.units, chat)
    head_start.settle()  # a head start the backend did not take: joined, dropped (the engine forks its workers)
    head_start.remember(cfg.output.tokenizer)  # what fastokens loaded, for the next command's head start
    phase("backend check")
    settings = recorded_settings(cfg, tok, plan.units, chat)
    job = Job(cfg.out, cfg.output, cfg.run, tok, S.dtype_for_vocab(tok.vocab_size), chat)
    lock = out.lock()  # one build at a time in OUT; says who holds it
    finished = False
    try:
        stamp, content = input_stamp(plan.found.files), input_stamp(plan.found.files, content_only=True)
        already = prepare_out(out, cfg.run, settings, stamp, lock.previous, content,
                              lambda: input_change(lock.previous, plan.found.files, lambda: _old_sources(out)))
        lock.record(stamp, stamp_listing(plan.found.files))
        if already:
            changed = _changed_since(out, plan.units, content)
            result = BuildResult(S.read_manifest(out), phase.seconds(), 0, len(plan.units),
                                 _notes(cfg, tok, plan.found) + ["build was already complete: nothing to do"], tok.added,
                                 warnings=[changed] if changed else [])
        else:
            records, held = prepare(cfg, out, settings, plan.units)
            phase("prepare output")
            todo = [u for u in plan.units if u.index not in records]
            job, notes = run(cfg, job, todo, plan.units, records, progress, check, exit_on_stop)
            phase("units (workers)")
            m, warn = finish(cfg, job, settings, plan, records, out, held, lock)
            phase("manifest")
            result = BuildResult(m, phase.seconds(), len(todo), len(plan.units) - len(todo),
                                 _notes(cfg, job.tokenizer, plan.found) + notes
                                 + no_fast_engine_note(job.tokenizer.backend, cfg.run.tokenizer_backend),
                                 job.tokenizer.added, phase.phases,
                                 [warn] if warn else [])
        finished = True
        return result
    finally:
        lock.release(finished)


def resolve(o: OutputSettings, while_waiting=None) -> tuple[TokenizerInfo, object]:
    """Step 1: the tokenizer, and a chat build's ChatJob (its template loaded and compiled once).
    ``while_waiting``: see ``resolve_tokenizer``."""
    # A chat template writes BOS and the end-of-turn tokens itself: a chat build adds neither.
    tok = resolve_tokenizer(o.tokenizer, o.eos and not o.chat, o.eos_token, o.bos and not o.chat, o.bos_token,
                            o.split_special_tokens, o.tokenizer_follows, while_waiting)
    if not o.chat:
        return tok, None
    from .chat_unit import chat_job

    return chat_job(o, tok)  # (the tokenizer with the pad id a chat build uses)


def plan_inputs(cfg: BuildConfig, on_sized=None) -> Plan:
    """Step 2: the inputs found, cut into slices and grouped into units."""
    o = cfg.output
    found = discover(list(cfg.inputs), exclude=cfg.out, on_sized=on_sized, every_text=o.format == "text",
                     text_suffixes=text_suffixes(o.text_extensions))
    if not found.files:
        raise no_inputs_error(cfg.inputs, found)
    slices = plan_slices(found.files, o.unit_bytes)
    if o.limit is not None:
        slices = limit_slices(slices, o.limit, o.text_field)
    return Plan(found, plan_units(slices, o.unit_bytes))


def prepare(cfg: BuildConfig, out: Storage, settings: dict, units: list[Unit]) -> tuple[dict, Storage | None]:
    """Step 3 (OUT made ready by ``prepare_out``): the holdout folder, and {unit index: record} of the
    units already finished (``--resume``)."""
    held = storage_for(holdout_out(cfg.out)) if cfg.output.holdout else None
    if held is not None:
        prepare_holdout(held, holdout_settings(settings))
    return (finished_records(out, units) if cfg.run.resume else {}), held


def run(cfg: BuildConfig, job: Job, todo: list[Unit], units: list[Unit], records: dict, progress,
        check: backend_check.DeferredCheck | None, exit_on_stop: bool = False) -> tuple[Job, list[str]]:
    """Step 4: the engine builds ``todo``; their records join ``records``. Returns the job as decided
    (a deferred backend check may have changed its tokenizer) and the engine's notes."""
    counter = Progress(progress, units, records)
    counter.report()  # at once: a bar shows from the start, and what a resumed build had done counts from there
    if check is not None and not todo:  # nothing left to build (--resume): the check still decides the manifest
        check.task.run_here(job)
    engine = engine_for(cfg.run, exit_on_stop)
    if todo:
        records.update((u.index, rec) for u, rec in engine.run(todo, job, counter, check.task if check else None))
    if check is not None:
        job = replace(job, tokenizer=check.tok)
        if check.fell_back and todo:  # tiktoken differed on the input: HF encodes everything, from the start
            engine = engine_for(cfg.run, exit_on_stop)
            records.update((u.index, rec) for u, rec in engine.run(todo, job, Progress(progress, units, records)))
    return job, engine.notes


def finish(cfg: BuildConfig, job: Job, settings: dict, plan: Plan, records: dict, out: Storage,
           held: Storage | None, lock) -> tuple[dict, str | None]:
    """Step 5: the manifests (the holdout's first, the build's last); returns the build's manifest and
    the mostly-skipped warning, if any."""
    units, tok = plan.units, job.tokenizer
    m = manifest(cfg, tok, job, settings, units, records, plan.found)
    hm = None
    if held is not None:
        h_records = finished_records(held, units)
        if len(h_records) < len(units):
            raise PackerError(f"holdout build {held.root} lacks {len(units) - len(h_records)} unit(s): rerun with --overwrite")
        hm = manifest(cfg, tok, job, holdout_settings(settings), units, h_records, plan.found)
        m["holdout"] = {"path": HOLDOUT_DIR, "fraction": float(cfg.output.holdout)} | {
            k: hm["totals"][k] for k in ("documents", "tokens", "rows", "padding")}
    if m["totals"]["documents"] == 0 and (hm is None or hm["totals"]["documents"] == 0):
        raise no_documents_error(m["totals"], [s for u in units for s in u.slices], cfg.output.text_field)
    warn = skipped_warning({**m["totals"], "holdout_documents": hm["totals"]["documents"] if hm else 0})
    remove_temp_files(out)  # every unit is done, no write of ours under way (the holdout's folder is inside out)
    if hm is not None:
        S.write_manifest(held, hm)  # index.arrow, then manifest.json
    faults.point("manifest")
    lock.check()  # an object-store lease taken over meanwhile (a long stall): this build must not finish
    S.write_manifest(out, m)
    return m, warn


def _old_sources(out: Storage) -> list | None:
    """Every shard's ``sources`` in a finished build's manifest (None: no such manifest)."""
    try:
        return [src for sh in json.loads(out.read(S.MANIFEST))["shards"] for src in sh["sources"]]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def _changed_since(out: Storage, units: list[Unit], content: str) -> str | None:
    """For a resume of a finished build: what says that its inputs changed since, at the same sizes
    (build.json's content stamp differs), so its shards hold the old content; None if they did not."""
    try:
        before = json.loads(out.read(S.BUILD_JSON)).get("inputs")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    if before is None or before == content:
        return None

    def record(i: int) -> dict:
        try:
            return json.loads(out.read(f"{S.UNIT_DIR}/{i:06d}.json"))
        except (OSError, ValueError, RecursionError):
            return {}

    path = content_change(units, record)
    what = f"{path} changed" if path else "input files changed"
    return (f"{what} since {out.root} was built (content, at the same size): its shards hold the old content; "
            "rebuild with --overwrite to use the new")


BYTES_NOTE = ("no --tokenizer: tokenizing to bytes (the built-in byte tokenizer: 256 byte ids + EOS); for a model's "
              "tokens pass --tokenizer with a tokenizer.json, a model folder or a hub model name")


def _tokenizer_notes(cfg: BuildConfig, tok: TokenizerInfo) -> list[str]:
    """The tokenizer's notes, after the one saying that no tokenizer was chosen (bytes, then: said with the
    build's other notes at its end, so a build that fails says its error alone)."""
    return ([BYTES_NOTE] if cfg.output.tokenizer is None else []) + list(tok.notes)


def _notes(cfg: BuildConfig, tok: TokenizerInfo, found) -> list[str]:
    notes = _tokenizer_notes(cfg, tok)
    if found.ignored:
        notes += [f"ignored {line}" for line in found.ignored_lines()]
    if found.duplicates:
        notes.append(f"{len(found.duplicates)} input path(s) named twice were read once, e.g. {found.duplicates[0]}")
    if getattr(found, "special", ()):
        notes.append(f"{len(found.special)} FIFO/device/socket input name(s) were not read (not regular files), "
                     f"e.g. {found.special[0]}")
    return notes


def _out_state(out: Storage, cfg: BuildConfig, settings: dict) -> str:
    """What a real build would do with the output location (for --dry-run), without touching it."""
    try:
        tops = out.tops()
        action = out_action(out.root, tops, cfg.run, settings, lambda: {"settings": {}, **json.loads(out.read(S.BUILD_JSON))})
    except PackerError as e:
        return f"the build would stop: {e}"
    return {"fresh": "would be created" if not tops else "would be built into",
            "continue": "would be resumed", "done": "already holds this build", "replace": "would be replaced"}[action]
