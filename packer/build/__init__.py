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

import time
from dataclasses import dataclass, field, replace

from .. import faults
from .. import shards as S
from ..errors import PackerError
from ..formats import discover, plan_slices
from ..io import storage_for
from ..tokenize import choose_backend, resolve_tokenizer
from .config import DEFAULT_UNIT_BYTES, BuildConfig, OutputSettings, RunSettings
from .local import LocalEngine
from .output import finished_records, manifest, prepare_out
from .plan import Unit, input_stamp, plan_units, recorded_settings, sample_texts
from .unit import Job, assemble_unit, encode_chunk

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


def chat_job(o: OutputSettings, tok):
    """The ChatJob of a chat build: its template (loaded and compiled here, once), fields and rules."""
    from ..formats.chat import ChatFields
    from ..tokenize.chat import load_chat_template
    from ..tokenize.tokenizer import _LOADED
    from .chat_unit import ChatJob

    if tok.kind != "hf":
        raise PackerError("--chat needs --tokenizer: a folder with tokenizer.json and a chat template")
    hf = _LOADED.get(tok.fingerprint)
    specials = [t.content for t in hf.get_added_tokens_decoder().values() if t.special] if hf is not None else []
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
    names (seq_len, tokenizer, text_field, pack, no_eos, eos_token, no_bos, bos_token, split_special_tokens, unit_mb,
    workers, strict, overwrite, resume, quiet, tokenizer_backend, engine,
    ray_address), validated the same way. ``progress`` (optional) is called
    as progress(done_bytes, docs, tokens, units_done, units, total_bytes);
    ``on_sized`` as on_sized(files_done, files) while input files are sized.
    """
    if isinstance(inputs, BuildConfig):
        if out is not None or options:
            raise PackerError("build(config) takes no other paths or options: they are in the config")
        cfg = inputs
        cfg.validate()
    else:
        if out is None:
            raise PackerError("build() needs the output folder: build(inputs, out, ...)")
        cfg = BuildConfig.of(inputs, out, **options)
    return _build(cfg, progress, on_sized)


class _Timeline:
    """Seconds per step of a build, in order (``BuildResult.phases``; bench/tokenizer_bench.py --timeline)."""

    def __init__(self, t0: float):
        self.t0 = self.last = t0
        self.phases: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = now - self.last
        self.last = now


def _build(cfg: BuildConfig, progress, on_sized) -> BuildResult:
    t0 = time.perf_counter()
    phase = _Timeline(t0)
    o = cfg.output
    # A chat template writes BOS and the end-of-turn tokens itself: a chat build adds neither.
    tok = resolve_tokenizer(o.tokenizer, o.eos and not o.chat, o.eos_token, o.bos and not o.chat, o.bos_token,
                            o.split_special_tokens)
    phase("load tokenizer")
    chat = chat_job(o, tok) if o.chat else None
    found = discover(list(cfg.inputs), exclude=cfg.out, on_sized=on_sized)
    if not found.files:
        raise PackerError(f"no input files found in {', '.join(cfg.inputs)}")
    units = plan_units(plan_slices(found.files, o.unit_bytes), o.unit_bytes)
    phase("discover + plan")
    if chat is not None:
        tok = replace(tok, backend="hf", backend_reason="chat build: HF tokenizers, whose offsets place the trained spans")
    else:
        tok = choose_backend(tok, cfg.run.tokenizer_backend,
                             lambda: sample_texts([s for u in units for s in u.slices], o.text_field))
    phase("engine check")
    settings = recorded_settings(cfg, tok, units, chat)
    job = Job(cfg.out, o.seq_len, o.pack, o.text_field, cfg.run.strict, tok, S.dtype_for_vocab(tok.vocab_size),
              o.max_record_bytes, chat)

    out = storage_for(cfg.out)
    lock = out.lock()  # one build at a time in OUT; says who holds it
    finished = False
    try:
        stamp = input_stamp(found.files)
        already = prepare_out(out, cfg, settings, stamp, lock.previous)
        lock.record(stamp)
        result = _run_units(cfg, tok, job, settings, units, found, out, already, phase, progress)
        finished = True
        return result
    finally:
        lock.release(finished)


def _run_units(cfg, tok, job, settings, units, found, out, already, phase: "_Timeline", progress) -> BuildResult:
    """The units not finished yet, then the manifest (last)."""
    t0 = phase.t0
    notes = list(tok.notes)
    if found.ignored:
        notes.append(f"ignored {len(found.ignored)} file(s) of unsupported type, e.g. {found.ignored[0]}")
    if found.duplicates:
        notes.append(f"{len(found.duplicates)} input path(s) named twice were read once, e.g. {found.duplicates[0]}")
    if getattr(found, "special", ()):
        notes.append(f"{len(found.special)} FIFO/device/socket input name(s) were not read (not regular files), "
                     f"e.g. {found.special[0]}")
    if already:
        return BuildResult(S.read_manifest(out), time.perf_counter() - t0, 0, len(units),
                           notes + ["build was already complete: nothing to do"], tok.added)

    records = finished_records(out, units) if cfg.run.resume else {}
    todo = [u for u in units if u.index not in records]
    phase("prepare output")
    if todo:
        notes += engine_for(cfg).run(todo, job, records, units, progress)
    phase("units (workers)")

    m = manifest(cfg, tok, job, settings, units, records, found)
    faults.point("manifest")
    out.put_json(S.MANIFEST, m)
    phase("manifest")
    return BuildResult(m, time.perf_counter() - t0, len(todo), len(units) - len(todo), notes, tok.added, phase.phases)
