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

from .config import DEFAULT_UNIT_BYTES, OPTIONS, BuildConfig, OutputSettings, RunSettings
from .engines import Progress, ray_engine
from .output import holdout_settings, manifest_of, prepare_holdout, prepare_out
from .packed import PackedShard, lay_out, pack_shard, shard_path
from .plan import Unit, plan_units
from .report import plan_lines, plural, write_summary
from .steps import BuildResult, build
from .unit import Job, assemble_unit, encode_chunk

__all__ = [
    "build", "BuildConfig", "OutputSettings", "RunSettings", "BuildResult", "Unit", "Job", "plan_units",
    "encode_chunk", "assemble_unit", "pack_shard", "lay_out", "PackedShard", "shard_path", "manifest_of", "Progress", "ray_engine", "prepare_out", "prepare_holdout", "holdout_settings", "DEFAULT_UNIT_BYTES", "OPTIONS", "plan_lines", "plural", "write_summary",
]
