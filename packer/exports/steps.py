"""``packer export``, top to bottom: a finished build in, the files another trainer reads out.

1. **check**: the options; the build opened (its manifest, its holdout's); the format's refusals (a chat
   build has no place in Megatron's or nanoGPT's files; OLMo-core needs an EOS after each document);
2. **target**: DEST's final names (refused if present, unless ``overwrite`` and they are an earlier export),
   a temp folder beside them;
3. **write**: for the build, then its holdout, each shard in manifest order, checked against its manifest
   entry (size, xxh3_128) and its documents' pieces put in order (``repacking.shard_pieces``, written where
   they lie with ``os.writev``, or joined with ``repacking.joined``; MDS takes the packed rows,
   ``shard_rows``), appended to the open files: memory is one shard's, whatever the build's size;
4. **commit**: every file fsynced and renamed into place, the one that marks the export complete last.

A damaged shard, a full disk or Ctrl-C leaves no file under DEST's names (the temp folder is removed).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .. import faults
from ..errors import PackerError
from ..io import first_line
from ..repacking import inside, open_source, shard_pieces, shard_rows
from . import mds, megatron, nanogpt, olmo
from .target import Target, write_mark

FORMATS = {m.NAME: m for m in (megatron, olmo, nanogpt, mds)}


@dataclass
class ExportResult:
    dest: str
    format: str
    files: list[str]  # what was written, in DEST's folder
    parts: dict  # "train" (and "val"): what each holds (documents or rows, tokens, dtype, paths)
    seconds: float
    notes: list[str] = field(default_factory=list)


def export(build: str, dest: str, *, format: str, overwrite: bool = False, eos_id: int | None = None,
           progress=None) -> ExportResult:
    """Write the finished build ``build`` as ``dest`` in a trainer's own format.

    ``format``: ``megatron`` (``dest.bin`` + ``dest.idx``, holdout ``dest_val.bin/.idx``), ``olmo``
    (``dest/part-*.npy``, holdout ``dest/val/``), ``nanogpt`` (``dest/train.bin``, holdout ``dest/val.bin``),
    ``mds`` (``dest/index.json`` + shards, holdout ``dest/val/``); docs/export.md says what each keeps.
    ``export("out/", "meg/data", format="megatron")`` is ``packer export out/ meg/data --format megatron``.
    ``overwrite`` replaces an earlier export at ``dest``. ``eos_id`` (olmo only): the id that ends each document,
    added where one does not end with it (a chat build records none). ``progress(done_bytes, total_bytes)`` is called
    after each shard. Raises ``PackerError`` (one line) for a user mistake or a damaged build.
    """
    t0 = time.perf_counter()
    if format not in FORMATS:
        raise PackerError(f"--format must be one of {', '.join(FORMATS)} (got {format!r})")
    fmt = FORMATS[format]
    build, dest = str(build), str(dest).rstrip("/") or "/"
    src = open_source(build)
    if os.path.abspath(dest) == os.path.abspath(build):
        raise PackerError(f"DEST {dest} is the build itself: export to another path")
    if inside(dest, build):
        raise PackerError(f"DEST {dest} is inside the build {build}: its files would be ones that build does not name; "
                          "export outside it")
    if eos_id is not None and (format != "olmo" or isinstance(eos_id, bool) or not isinstance(eos_id, int)):
        raise PackerError(f"--eos-id takes a whole number, for --format olmo only (got {eos_id!r})")
    notes = fmt.check(src, eos_id)
    base = os.path.basename(dest)
    target = Target(dest, fmt.names(base, src.holdout is not None), overwrite)
    parts = {}
    try:
        todo = [("train", src)] + ([("val", src.holdout)] if src.holdout is not None else [])
        total = sum(e["bytes"] for _, s in todo for e in s.manifest["shards"])
        done = 0
        for part, s in todo:
            writer = fmt.Writer(target, base, s, part, eos_id)
            for entry in s.manifest["shards"]:
                read = shard_rows if fmt.READS_ROWS else shard_pieces
                writer.add(read(s.store, entry, s.seq_len, s.manifest["dtype"], s.chat))
                done += entry["bytes"]
                faults.point("export_shard")
                if progress:
                    progress(done, total)
            parts[part] = writer.close()
            if parts[part].get("eos_added"):
                notes.append(f"{format}: {parts[part]['eos_added']:,} {part} documents did not end with EOS "
                             f"(id {parts[part]['eos_id']}): one was added after each, not trained on")
        info = {"format": format, "build": os.path.abspath(build), "manifest_xxh3_128": src.digest, "notes": notes,
                **parts, "source": origin(src)}
        if len(target.names) == 1:  # a folder: what it was made from, beside the data
            write_mark(target.path(base), info)
        else:  # megatron: PREFIX.packer.json beside PREFIX.bin/.idx
            write_mark(target.path(base + ".packer.json"), info)
        target.commit()
    except OSError as e:
        target.discard()
        raise PackerError(f"cannot write {dest}: {first_line(e)}; nothing was kept") from None
    except BaseException:
        target.discard()
        raise
    return ExportResult(dest, format, target.names, parts, time.perf_counter() - t0, notes)


def origin(src) -> dict:
    """What ``packer repack`` needs to give the build's shards again from the export (packer/repacking/foreign.py):
    the manifest's head, and the documents of each unit (each shard) in order, of the holdout too."""
    m = src.manifest
    head = {k: m[k] for k in ("seq_len", "dtype", "pad_id", "eos_id", "vocab_size", "tokenizer", "settings")}
    return {**head, "units": [e["documents"] for e in m["shards"]],
            "holdout": None if src.holdout is None else {
                **m["holdout"], "settings": src.holdout.manifest["settings"],
                "units": [e["documents"] for e in src.holdout.manifest["shards"]]}}
