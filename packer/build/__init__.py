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
from dataclasses import dataclass, field

from .. import faults
from .. import shards as S
from ..errors import PackerError
from ..formats import discover, no_inputs_error, plan_slices
from ..io import storage_for
from ..tokenize import choose_backend, resolve_tokenizer
from .config import DEFAULT_UNIT_BYTES, BuildConfig, OutputSettings, RunSettings
from .local import LocalEngine
from .output import finished_records, manifest, prepare_out
from .plan import Unit, plan_units, recorded_settings, sample_texts
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
    names (seq_len, tokenizer, text_field, pack, no_eos, eos_token, unit_mb,
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


def _build(cfg: BuildConfig, progress, on_sized) -> BuildResult:
    t0 = time.perf_counter()
    o = cfg.output
    tok = resolve_tokenizer(o.tokenizer, o.eos, o.eos_token)
    found = discover(list(cfg.inputs), exclude=cfg.out, on_sized=on_sized)
    if not found.files:
        raise no_inputs_error(cfg.inputs, found)
    units = plan_units(plan_slices(found.files, o.unit_bytes), o.unit_bytes)
    tok = choose_backend(tok, cfg.run.tokenizer_backend,
                         lambda: sample_texts([s for u in units for s in u.slices], o.text_field))
    settings = recorded_settings(cfg, tok, units)
    job = Job(cfg.out, o.seq_len, o.pack, o.text_field, cfg.run.strict, tok, S.dtype_for_vocab(tok.vocab_size))

    out = storage_for(cfg.out)
    already = prepare_out(out, cfg, settings)
    notes = list(tok.notes)
    if found.ignored:
        notes += [f"ignored {line}" for line in found.ignored_lines()]
    if found.duplicates:
        notes.append(f"{len(found.duplicates)} input path(s) named twice were read once, e.g. {found.duplicates[0]}")
    if already:
        return BuildResult(S.read_manifest(out), time.perf_counter() - t0, 0, len(units),
                           notes + ["build was already complete: nothing to do"])

    records = finished_records(out, units) if cfg.run.resume else {}
    todo = [u for u in units if u.index not in records]
    if todo:
        notes += engine_for(cfg).run(todo, job, records, units, progress)

    m = manifest(cfg, tok, job, settings, units, records, found)
    faults.point("manifest")
    out.put_json(S.MANIFEST, m)
    return BuildResult(m, time.perf_counter() - t0, len(todo), len(units) - len(todo), notes)
