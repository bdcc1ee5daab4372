"""What a build is asked to do: the settings that decide the output bytes, apart from how it runs.

``OutputSettings`` are recorded in build.json and the manifest, and a
``--resume`` must match them; ``RunSettings`` change only how fast or how
loudly the same bytes are made. ``BuildConfig.of(inputs, out, **options)``
takes the CLI's options by the CLI's names (``seq_len``, ``tokenizer``,
``unit_mb``, ``no_eos``, ``workers``, ...) and routes each to its half.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import PackerError
from ..formats import DEFAULT_MAX_RECORD
from ..pack import MODES
from ..tokenize import BACKENDS, FOLLOWS, check_backend, check_follows
from ..tokenize.chat import TRAIN_ON
from .options import in_python_terms, mb_option, off_option, option, options_of

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
    from ..io import memory_limit

    return memory_limit()


ENGINES = ("local", "ray")
INPUT_FORMATS = ("auto", "text")


def text_suffixes(value: str | None) -> tuple[str, ...]:
    """--text-extensions as endings (".py,rs, .TOML": (".py", ".rs", ".toml")); PackerError for one that is no ending."""
    out = []
    for part in value.split(",") if value is not None else ():
        ext = part.strip().lower()
        ext = ext if ext.startswith(".") else "." + ext
        if ext == "." or "/" in ext or "\\" in ext:
            raise PackerError(f"--text-extensions takes file endings separated by commas, like .py,.rs (got {value!r})")
        out.append(ext)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class OutputSettings:
    """Everything that changes the bytes written (recorded; ``--resume`` compares it). Each field is an
    option of ``packer build`` and ``build()`` (options.py): its flag, help and default are here."""

    seq_len: int = option(2048, "Tokens per packed row.")
    tokenizer: str | None = option(None, "tokenizer.json, a folder holding one, or a hub name. Default: built-in "
                                         "bytes (256 byte ids + EOS), no files needed.", metavar="T")
    text_field: str = option("text", "Field holding the text in jsonl/parquet; dots reach nested objects (meta.text).")
    format: str = option("auto", "auto: each file by its name (.txt .md .jsonl .json .parquet .arrow; others ignored, "
                                 "and counted). text: every file is one text document (source code, README, LICENSE, "
                                 "Makefile); a binary file (a NUL byte in its first 8 KB) is skipped and counted.",
                         choices=INPUT_FORMATS)
    text_extensions: str | None = option(None, "Also read files with these endings as text, one document per file "
                                               "(.py,.rs,.toml); a binary one is skipped and counted.",
                                         metavar=".EXT,...")
    pack: str = option("bfd", "bfd: best-fit decreasing, documents that fit are never split. concat: concatenate "
                              "and cut.", choices=MODES)
    eos: bool = off_option("Do not append the end-of-document token after each document.", "--no-eos")
    eos_token: str | None = option(None, "Token to use as end-of-document (default: the tokenizer's, e.g. <|endoftext|>).")
    bos: bool = off_option("Put nothing before each document, whatever the tokenizer's template says.", "--no-bos")
    bos_token: str | None = option(
        None, "Put TOKEN before each document instead of what the tokenizer's template puts there (default: as "
              "transformers' tokenizer(text) does, e.g. <s> for Llama-2/Mistral, none for GPT-2).",
        flag="--bos", metavar="TOKEN")
    split_special_tokens: bool = option(
        False, "Encode special-token strings met in the text (<s>, [MASK], <|endoftext|>) as plain text, as HF's "
               "split_special_tokens does; by default they become special ids and are counted in the summary.")
    tokenizer_follows: str = option("transformers", "A model folder: encode as transformers builds it, or as its "
                                                    "tokenizer.json says (file).", choices=FOLLOWS)
    unit_bytes: int = mb_option(DEFAULT_UNIT_BYTES, "Input MB per work unit (one shard each). Changes the output bytes.",
                                "--unit-mb")
    max_record_bytes: int = mb_option(
        DEFAULT_MAX_RECORD, "Longest record read (a jsonl line, a text file decompressed, a parquet or arrow cell, a "
                            ".json array element), in MB; a longer one is skipped and counted (too_long). Bounds a "
                            "reader's memory (.json elements and arrow batches are read whole first). Changes the "
                            "output bytes only when a record is over it.", "--max-record-mb")
    # Chat builds (docs/chat.md): conversations through the tokenizer's chat template, with a loss mask.
    chat: bool = option(False, "Chat data (docs/chat.md): records with messages (or prompt/completion), rendered by "
                               "the tokenizer's chat template, trained only on the assistant's turns (a loss_mask column).")
    chat_template: str | None = option(None, "With --chat: a jinja chat template to use instead of the tokenizer's "
                                             "(tokenizer_config.json).", metavar="FILE")
    train_on: str = option(
        "assistant", "With --chat (docs/chat.md): assistant = each reply as generated (reasoning, content, tool "
                     "calls) and its end-of-turn token, or the {% generation %} spans; assistant+tool = and tool "
                     "results; all = all.", choices=TRAIN_ON)
    truncate: bool = option(False, "With --chat: keep the first seq_len tokens of a longer conversation (counted) "
                                   "instead of dropping it (counted as too_long).")
    messages_field: str = option("messages", "With --chat: the field of the messages list.")
    prompt_field: str = option("prompt", "With --chat: the prompt field of prompt/completion records.")
    completion_field: str = option("completion", "With --chat: the completion field.")
    limit: int | None = option(None, "Only the first N documents, in input order (deterministic): try settings "
                                     "before the long build.", metavar="N")
    holdout: float = option(
        0.0, "Hold out this fraction of documents, chosen by a hash of their text (so the same whatever the order, "
             "workers or engine), as a second build in OUT/holdout/ (open it with PackedDataset or packer stats).",
        metavar="FRACTION", show_default=False)


@dataclass(frozen=True)
class RunSettings:
    """How the build runs: the same bytes whatever these are (options of ``packer build`` too)."""

    workers: int = option(0, "Worker processes, one core each (0: one per CPU that affinity and a cgroup quota allow).",
                          show_default="the CPUs this process may use")
    strict: bool = option(False, "Stop at the first malformed record instead of skipping and counting it.")
    overwrite: bool = option(False, "Replace an existing build in OUT.")
    resume: bool = option(False, "Continue a killed build in OUT; finished work is kept.")
    quiet: bool = option(False, "No progress or summary; errors only.", short="-q")
    tokenizer_backend: str = option(
        "auto", "Encoder for an HF tokenizer: auto = the fastest that gives HF's ids, checked first (fastokens, "
                "else tiktoken, else HF; gigatoken for a big SentencePiece BPE such as Gemma 3 where installed; chosen "
                "by the input's size as text, decompressed; docs/tokenizers.md); hf, tiktoken, fastokens or gigatoken "
                "(packer[gigatoken]) to force one (stops where it is not exact). Same shards.",
        choices=BACKENDS)
    engine: str = option("local", "local: worker processes on this machine. ray: each unit a Ray task, on a cluster "
                                  "(packer[ray]; docs/distributed.md). The output is the same.", choices=ENGINES)
    ray_address: str | None = option(
        None, "With --engine ray: the cluster to use (HOST:PORT, auto, ray://HOST:PORT). Default: $RAY_ADDRESS, "
              "else a Ray started on this machine for the build.", metavar="ADDR")
    dry_run: bool = option(False, "Discover and plan only: print the files, formats, sizes, units and the settings "
                                  "that would be recorded; write nothing.")
    summary_json: str | None = option(
        None, "Also write the end-of-build summary as JSON to FILE ('-': one line on stdout); on failure "
              "{\"ok\": false, \"error\": ...}. Schema: docs/stats.md.", metavar="FILE")


# Every option of packer build and build(), in the order of --help: the bytes' settings, then the run's.
OPTIONS = options_of(OutputSettings, "output") + options_of(RunSettings, "run")
_BY_NAME = {o.name: o for o in OPTIONS}
_BY_FIELD = {o.field: o for o in OPTIONS}  # build(unit_bytes=...) and BuildConfig.but take the fields' names too


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
        """A config from the CLI's option names; unknown names and bad values raise ``PackerError``
        (naming options by keyword: ``resume=True``, unless the CLI called)."""
        try:
            return cls._of(inputs, out, options)
        except PackerError as e:
            in_python_terms(e, OPTIONS)
            raise

    @classmethod
    def _of(cls, inputs, out, options: dict) -> "BuildConfig":
        if isinstance(inputs, (str, os.PathLike)):
            inputs = (inputs,)
        given: dict[str, dict] = {"output": {}, "run": {}}
        for name, value in options.items():
            if name in _BY_NAME:
                o = _BY_NAME[name]
                value = o.value(value)
            elif name in _BY_FIELD:  # a field's own name (unit_bytes, eos): its value as the field holds it
                o = _BY_FIELD[name]
            else:
                raise PackerError(f"unknown build option {name!r}; options are: {', '.join(sorted(_BY_NAME))}")
            given[o.half][o.field] = value
        cfg = cls(tuple(os.fspath(p) for p in inputs), os.fspath(out), OutputSettings(**given["output"]),
                  RunSettings(**given["run"]))
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
            raise PackerError(f"--seq-len must be at least 2 (got {o.seq_len!r})")
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
        if o.train_on not in TRAIN_ON:
            raise PackerError(f"unknown --train-on {o.train_on!r}: choose from {', '.join(TRAIN_ON)}")
        if not o.chat and (o.chat_template is not None or o.truncate or o.train_on != "assistant"):
            raise PackerError("--chat-template, --train-on and --truncate apply to chat builds: add --chat")
        if o.format not in INPUT_FORMATS:
            raise PackerError(f"unknown --format {o.format!r}: choose from {', '.join(INPUT_FORMATS)}")
        if o.text_extensions is not None:
            text_suffixes(o.text_extensions)
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
        if isinstance(r.workers, bool) or not isinstance(r.workers, int) or r.workers < 0:
            raise PackerError(f"--workers must be 0 (all cores) or a positive number (got {r.workers!r})")
