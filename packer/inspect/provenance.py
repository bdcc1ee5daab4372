"""Provenance: where in the raw input each document of a packed row came from (``packer show OUT ROW --source``).

Nothing is stored for it: a build's bytes stay as they are. The unit that made a document is read again,
in order, with the build's own readers and settings: its input slices are planned again from the
manifest's ``sources`` (each file must still be there with the slices it had: else one line), parsed
with the recorded ``text_field``, the ``--holdout`` split applied (the holdout build, OUT/holdout, keeps
the other side), and the Documents counted to the document's ``doc_index``. A repack is followed through
its source builds (``sources[].build``, recursively): a repack keeps each document's index within its unit.

What it does not do: chat builds are refused (which conversations a unit kept is decided after the
template and the tokenizer ran: template errors, ``too_long``); so is a unit whose inputs now give another
number of documents than the build holds: an input edited in place, or a ``--no-eos`` build that dropped
documents encoding to no tokens (``no_tokens``), which only the tokenizer can tell. No tokenizer is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import shards as S
from ..errors import PackerError
from ..formats import DEFAULT_MAX_RECORD, REGISTRY, Document, InputFile, detect_format, iter_parts
from ..io import storage_for
from .show import read_row


@dataclass(frozen=True)
class DocumentSource:
    """Where one document piece of a row came from."""

    piece: int  # the piece's place in the row (0-based), as ``packer show`` lists them
    unit: int  # the document, as ``packer show`` names it: doc UNIT:INDEX of the build shown
    doc: int
    file: str  # the input file, as the build that read it recorded it
    kind: str  # "line" (1-based line: JSON Lines, JSON), "row" (0-based: Parquet, Arrow), "byte" (text: offset)
    at: int
    build: str = ""  # the build that read the input (the source build of a repack, followed to the raw input)

    def __str__(self) -> str:
        where = f"{self.file}:{self.at}" if self.kind == "line" else f"{self.file}: {self.kind} {self.at}"
        return f"piece {self.piece} (doc {self.unit}:{self.doc}): {where}"


def source_of(out: str, row: int) -> list[DocumentSource]:
    """Where each document piece of global ``row`` of build ``out`` came from, in the row's order.
    Raises ``PackerError`` (one line) when that cannot be recomputed: an input gone or changed since
    the build, a source build of a repack changed, or a chat build."""
    out = str(out)
    view = read_row(out, row)
    found: dict[int, tuple[str, list[tuple[str, str, int]]]] = {}
    result = []
    for i, p in enumerate(view.pieces):
        if p.unit not in found:
            found[p.unit] = unit_sources(out, p.unit)
        build, docs = found[p.unit]
        if not 0 <= p.doc < len(docs):
            raise PackerError(f"{out}: doc {p.unit}:{p.doc} is not among the {len(docs):,} documents of its unit")
        file, kind, at = docs[p.doc]
        result.append(DocumentSource(i, p.unit, p.doc, file, kind, at, build))
    return result


def unit_sources(out: str, unit: int) -> tuple[str, list[tuple[str, str, int]]]:
    """(the build that read the input, [(file, kind, at)] per document of ``unit`` of ``out``, by doc_index)."""
    build, manifest, entry = _raw_unit(str(out), unit, ())
    return build, _documents(build, manifest, entry)


def _entry(out: str, manifest: dict, unit: int) -> dict:
    for e in manifest["shards"]:
        if e.get("unit") == unit:
            return e
    raise PackerError(f"{out}: the build has no unit {unit}")


def _raw_unit(out: str, unit: int, seen: tuple) -> tuple[str, dict, dict]:
    """The build that read unit ``unit``'s input (following repacks), its manifest and the unit's shard entry."""
    if out in seen:
        raise PackerError(f"{out}: its repack sources lead back to itself")
    manifest = S.read_manifest(out)
    settings = manifest["settings"]
    if "chat" in settings:
        raise PackerError(f"{out}: --source does not support chat builds: which conversations a unit kept is "
                          "decided after the chat template and the tokenizer ran")
    entry = _entry(out, manifest, unit)
    if "repacked_from" not in settings:
        return out, manifest, entry
    if len(entry["sources"]) != 1:
        raise PackerError(f"{out}: unit {unit} names {len(entry['sources'])} source shards; a repack unit has one")
    src = entry["sources"][0]
    try:
        source = S.read_manifest(src["build"])
    except PackerError as e:
        raise PackerError(f"source build {src['build']} of {out} cannot be read ({e}); provenance needs it") from None
    for e in source["shards"]:
        if e["path"] == src["path"]:
            if e.get(S.CHECKSUM) != src.get(S.CHECKSUM):
                break
            return _raw_unit(src["build"], e["unit"], seen + (out,))
    raise PackerError(f"source build {src['build']} changed since {out} was repacked from it "
                      f"({src['path']} is not the shard it was); provenance needs the source builds as they were")


def _documents(out: str, manifest: dict, entry: dict) -> list[tuple[str, str, int]]:
    settings = manifest["settings"]
    text_field = settings["text_field"]
    field = tuple(text_field.split("."))
    max_record = settings.get("max_record_bytes", DEFAULT_MAX_RECORD)
    fraction = settings.get("holdout")
    cut = int(fraction * 2**64) if fraction else None
    held = settings.get("split") == "holdout"
    docs = []
    for src in entry["sources"]:
        sl = _slice(src, settings)
        fmt = REGISTRY[sl.file.format]
        kind = fmt.location_kind
        row = fmt.first_row(sl) if kind == "row" else 0
        for part in iter_parts(sl, text_field, max_record=max_record):
            where = fmt.locations(part)
            for r, rec in enumerate(fmt.parse(part, field)):
                if type(rec) is Document and (cut is None or _held(rec.text, cut) == held):
                    docs.append((sl.file.path, kind, row + where[r]))
            if kind == "row":
                row += len(part.items)
    if len(docs) != entry["documents"]:
        raise PackerError(
            f"unit {entry['unit']} of {out}: its inputs give {len(docs):,} documents now, the build holds "
            f"{entry['documents']:,}: an input changed since the build, or documents that encoded to no tokens "
            "were dropped (--no-eos), which only the tokenizer tells; provenance needs the inputs as built")
    return docs


def _held(text: str, cut: int) -> bool:
    """Whether ``--holdout`` put ``text`` in the holdout build: pipeline/unit.py's holdout_split, for one text."""
    import xxhash

    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass")) < cut


def _slice(src: dict, settings: dict):
    """The Slice that ``src`` (a manifest's ``sources`` entry) names, planned again as the build planned it."""
    path, unit_bytes = src["path"], settings["unit_bytes"]
    gone = PackerError(f"input {path} changed or is gone since the build; provenance needs the inputs")
    detected = detect_format(path, settings.get("format") == "text", tuple(settings.get("text_extensions", ())))
    size = storage_for(path).size() if detected else None
    if size is None:
        raise gone
    try:
        planned = REGISTRY[detected[0]].plan(InputFile(path, *detected, size), unit_bytes)
    except PackerError:
        raise gone from None
    for sl, _ in planned:  # (a .json file of JSON Lines comes back as jsonl)
        if (sl.start, sl.end) == (src["start"], src["end"]):
            return replace(sl, max_items=src.get("max_items"))
    raise gone
