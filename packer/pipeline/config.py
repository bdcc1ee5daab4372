"""What a build is asked to do: the settings that decide the output bytes, apart from how it runs.

``OutputSettings`` are recorded in build.json and the manifest, and a
``--resume`` must match them; ``RunSettings`` change only how fast or how
loudly the same bytes are made. ``BuildConfig.of(inputs, out, **options)``
takes the CLI's options by the CLI's names (``seq_len``, ``tokenizer``,
``unit_mb``, ``no_eos``, ``workers``, ...) and routes each to its half.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from ..errors import PackerError
from ..formats.base import DEFAULT_MAX_RECORD
from ..pack import MODES
from ..tokenize import check_backend, check_follows

DEFAULT_UNIT_BYTES = 64 << 20
# The longest row: 2**31 - 1 keeps every offset in an Arrow list and every
# doc_lens value (uint32) in range; a build row of it is 8 GiB of uint32 ids.
MAX_SEQ_LEN = (1 << 31) - 1
# Memory per slot of seq_len while a unit is packed and written: measured, a
# --seq-len 20,000,000 build of sample_data/ peaked 1.39 GB above a small one (~70 B/slot).
ROW_BYTES_PER_SLOT = 80


def _memory_limit():
    """The memory this process may use (``.bytes``) and what sets it (``.source``): the machine's, or
    less where a cgroup (a container, a batch job) or RLIMIT_AS sets less (packer/io/memory.py)."""
    from ..io.memory import memory_limit

    return memory_limit()
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class OutputSettings:
    """Everything that changes the bytes written (recorded; ``--resume`` compares it)."""

    seq_len: int = 2048  # slots per row
    tokenizer: str | None = None  # None = built-in bytes
    text_field: str = "text"  # dots reach nested objects
    pack: str = "bfd"  # "bfd" | "concat"
    eos: bool = True  # an end-of-document id after every document
    eos_token: str | None = None  # None = the tokenizer's own
    bos: bool = True  # what the tokenizer's template puts before each text (BOS, [CLS]); False = --no-bos
    bos_token: str | None = None  # --bos TOKEN: this instead of the template's
    split_special_tokens: bool = False  # special-token strings in text encoded as plain text (HF's semantics)
    tokenizer_follows: str = "transformers"  # a model folder as transformers builds it, or "file" (tokenize/follows.py)
    unit_bytes: int = DEFAULT_UNIT_BYTES  # input bytes per work unit (one shard each)
    max_record_bytes: int = DEFAULT_MAX_RECORD  # a longer record is skipped (too_long): bounds a reader's memory
    # Chat builds (docs/chat.md): conversations through the tokenizer's chat template, with a loss mask.
    chat: bool = False
    chat_template: str | None = None  # a jinja file; None = the tokenizer's (tokenizer_config.json)
    train_on: str = "assistant"  # packer.tokenize.chat.TRAIN_ON: "assistant" | "assistant+tool" | "all"
    truncate: bool = False  # a conversation over seq_len: False = dropped and counted, True = cut and counted
    messages_field: str = "messages"
    prompt_field: str = "prompt"
    completion_field: str = "completion"
    limit: int | None = None  # only the first N documents, in input order (None = all)
    holdout: float = 0.0  # fraction of documents (by a hash of their text) written to OUT/holdout/ instead


@dataclass(frozen=True)
class RunSettings:
    """How the build runs: the same bytes whatever these are."""

    workers: int = 0  # 0 = all cores
    strict: bool = False  # stop at the first bad record instead of counting it
    overwrite: bool = False
    resume: bool = False
    quiet: bool = False
    tokenizer_backend: str = "auto"  # "auto" | "hf" | "tiktoken": the ids are the same
    engine: str = "local"  # "local" (worker processes) | "ray" (Ray tasks): same bytes
    ray_address: str | None = None  # engine "ray": a running cluster; None = start one here
    dry_run: bool = False  # discover and plan, print what would be built, write nothing
    summary_json: str | None = None  # a local file to write the end-of-build summary to, as JSON ("-": stdout)


_OUTPUT = {f.name for f in fields(OutputSettings)}
_RUN = {f.name for f in fields(RunSettings)}
_ALIASES = {"unit_mb": "unit_bytes", "no_eos": "eos", "no_bos": "bos", "max_record_mb": "max_record_bytes"}  # the CLI's spellings


@dataclass(frozen=True)
class BuildConfig:
    """A build: its inputs (folders, files, globs, URIs), its output location, and the two halves of its settings."""

    inputs: tuple[str, ...]
    out: str
    output: OutputSettings = field(default_factory=OutputSettings)
    run: RunSettings = field(default_factory=RunSettings)

    def __post_init__(self):
        # BuildConfig(inputs="corpus/") means one input, not one per character.
        if isinstance(self.inputs, (str, os.PathLike)):
            object.__setattr__(self, "inputs", (os.fspath(self.inputs),))
        elif isinstance(self.inputs, list):
            object.__setattr__(self, "inputs", tuple(os.fspath(p) if isinstance(p, os.PathLike) else p for p in self.inputs))
        if isinstance(self.out, os.PathLike):
            object.__setattr__(self, "out", os.fspath(self.out))

    @classmethod
    def of(cls, inputs, out, **options) -> "BuildConfig":
        """A config from the CLI's option names; unknown names and bad values raise ``PackerError``."""
        if isinstance(inputs, (str, os.PathLike)):
            inputs = (inputs,)
        out_opts, run_opts = {}, {}
        for name, value in options.items():
            if name in ("unit_mb", "max_record_mb"):
                try:
                    value = int(float(value) * (1 << 20))
                except (TypeError, ValueError, OverflowError):
                    raise PackerError(f"--{name.replace('_', '-')} must be a number of MB (got {value!r})") from None
            elif name in ("no_eos", "no_bos"):
                value = not value
            name = _ALIASES.get(name, name)
            if name in _OUTPUT:
                out_opts[name] = value
            elif name in _RUN:
                run_opts[name] = value
            else:
                known = sorted((_OUTPUT | _RUN | set(_ALIASES)) - {"unit_bytes", "eos", "bos", "max_record_bytes"})
                raise PackerError(f"unknown build option {name!r}; options are: {', '.join(known)}")
        cfg = cls(tuple(os.fspath(p) for p in inputs), os.fspath(out), OutputSettings(**out_opts), RunSettings(**run_opts))
        cfg.validate()
        return cfg

    def options(self) -> dict:
        """Every setting by its name (``unit_bytes``, ``eos``, ``bos``: the unaliased names)."""
        return {**vars(self.output), **vars(self.run)}

    def but(self, **changes) -> "BuildConfig":
        """This config with ``changes`` (inputs, out, or any option by name) applied."""
        inputs, out = changes.pop("inputs", self.inputs), changes.pop("out", self.out)
        return BuildConfig.of(inputs, out, **{**self.options(), **changes})

    def validate(self) -> None:
        """Refuse what cannot be built, in one line naming the option."""
        o, r = self.output, self.run
        if isinstance(self.inputs, str) or not all(isinstance(p, str) for p in self.inputs):
            raise PackerError("inputs must be a list of paths (a single path is given as a string to build())")
        if not self.inputs:
            raise PackerError("no inputs given")
        if not isinstance(o.seq_len, int) or o.seq_len < 2:
            raise PackerError(f"--seq-len must be at least 2 (got {o.seq_len})")
        if o.seq_len > MAX_SEQ_LEN:
            raise PackerError(f"--seq-len {o.seq_len:,} is too large: one row of it cannot be allocated "
                              f"(at most {MAX_SEQ_LEN:,} tokens per row)")
        row_bytes = o.seq_len * ROW_BYTES_PER_SLOT
        limit = _memory_limit()
        if row_bytes > limit.bytes:
            raise PackerError(f"--seq-len {o.seq_len:,} is too large: one row needs about {row_bytes / (1 << 30):,.1f} GiB "
                              f"while packing, more than the {limit.bytes / (1 << 30):,.1f} GiB this process may use "
                              f"({limit.source})")
        if not isinstance(o.max_record_bytes, int) or o.max_record_bytes < 1024:
            raise PackerError(f"--max-record-mb must be at least 0.001 (1 KB); got {o.max_record_bytes} bytes")
        if o.unit_bytes < 4096:
            raise PackerError(f"--unit-mb must be at least 0.004 (4 KB); got {o.unit_bytes} bytes")
        if o.pack not in MODES:
            raise PackerError(f"unknown --pack {o.pack!r}: choose from {', '.join(MODES)}")
        if r.engine not in ENGINES:
            raise PackerError(f"unknown --engine {r.engine!r}: choose local or ray")
        check_backend(r.tokenizer_backend)
        check_follows(o.tokenizer_follows)
        if o.bos_token is not None and not o.bos:
            raise PackerError("--bos TOKEN and --no-bos contradict each other: pass one")
        if r.resume and r.overwrite:
            raise PackerError("--resume and --overwrite contradict each other: --resume keeps the build in OUT, "
                              "--overwrite replaces it; pass one")
        from ..tokenize.chat import TRAIN_ON

        if o.train_on not in TRAIN_ON:
            raise PackerError(f"unknown --train-on {o.train_on!r}: choose from {', '.join(TRAIN_ON)}")
        if not o.chat and (o.chat_template is not None or o.truncate or o.train_on != "assistant"):
            raise PackerError("--chat-template, --train-on and --truncate apply to chat builds: add --chat")
        if not isinstance(o.text_field, str) or not o.text_field or "" in o.text_field.split("."):
            raise PackerError(f"--text-field must name a field (got {o.text_field!r}); dots reach nested objects: meta.text")
        if o.eos_token is not None and not o.eos:
            raise PackerError("--eos-token and --no-eos contradict each other: --no-eos appends no end-of-document token")
        if o.eos_token is not None and o.tokenizer is None:
            raise PackerError("--eos-token needs --tokenizer: the built-in byte tokenizer's end-of-document id is always 256")
        if o.limit is not None and (isinstance(o.limit, bool) or not isinstance(o.limit, int) or o.limit < 1):
            raise PackerError(f"--limit must be a positive number of documents (got {o.limit})")
        if isinstance(o.holdout, bool) or not isinstance(o.holdout, (int, float)) or not 0.0 <= o.holdout < 1.0:
            raise PackerError(f"--holdout must be a fraction of documents, 0 <= f < 1 (got {o.holdout})")
        if r.dry_run and (r.resume or r.overwrite):
            raise PackerError("--dry-run writes nothing: it takes no --resume or --overwrite")
        if o.chat and (o.holdout or o.limit is not None):
            raise PackerError("--holdout and --limit are not supported with --chat yet: split or cut the conversations first")
        if r.workers < 0:
            raise PackerError(f"--workers must be 0 (all cores) or a positive number (got {r.workers})")
