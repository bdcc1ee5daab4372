"""Build: raw text in, verified shards and a manifest out.

The unit of output is a ``Unit`` (plan.py): a few slices of input, about
``unit_bytes`` of it, that become one shard plus a unit record,
deterministically (unit.py). Everything else follows from that:

- parallelism: chunks of a unit are tokenized on any core, units are packed
  as they complete (engines/: worker processes, or Ray tasks);
- byte-identical output whatever ``--workers`` or the engine: a unit's shard
  depends on its input and the output settings alone;
- crash-resume: a unit whose record and shard exist is finished; ``--resume``
  runs only the others (output.py);
- the manifest is assembled from unit records last, so a build folder with a
  manifest is complete.

The build itself reads top to bottom in steps.py. This module only re-exports.
"""

# Each name and the module it lives in, imported on first use: a repack (packer/repacking/) takes the packing
# half and the manifest without importing the readers, the tokenizers and the engines a build needs.
_LAZY = {
    "build": "steps", "BuildResult": "steps",
    "BuildConfig": "config", "OutputSettings": "config", "RunSettings": "config", "OPTIONS": "config",
    "DEFAULT_UNIT_BYTES": "config",
    "Unit": "plan", "plan_units": "plan",
    "Job": "unit", "encode_chunk": "unit", "assemble_unit": "unit",
    "plan_lines": "report", "plural": "report", "write_summary": "report",
    # what packer repack reuses: the packing half of a unit, the manifest, OUT's rules, progress, the Ray engine
    "pack_shard": "packed", "lay_out": "packed", "PackedShard": "packed", "Scattered": "packed", "shard_path": "packed",
    "manifest_of": "output", "prepare_out": "output", "OutFlags": "output", "prepare_holdout": "output", "holdout_settings": "output",
    "Progress": "progress", "ray_engine": "engines",
}
__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'packer.pipeline' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
