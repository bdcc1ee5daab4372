"""A finished build as input: its manifest checked, and each shard's documents joined again from their pieces.

What ``packer repack`` (and ``packer export``) read instead of raw text. A shard holds every piece of each of
its documents (a document never spans two shards), each piece with its document's index in the unit
(``doc_index``) and its first token's place in the document (``doc_offset``): sorting the pieces by
(document, offset) and copying them back to back gives every document's tokens exactly, in input order,
with no tokenizer (docs/format.md). Every shard is checked against its manifest entry (size and xxh3_128)
before it is used, and its pieces must join up: a damaged source is one ``ShardError`` naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import Storage, first_line, is_uri, storage_for
from ..pipeline import Scattered


@dataclass(frozen=True)
class Source:
    """One finished build, opened: where it is, its manifest, and its holdout build if it has one."""

    root: str  # as the user named it (a folder or a URI prefix)
    manifest: dict
    digest: str  # xxh3_128 of manifest.json's bytes: which build exactly this was
    holdout: "Source | None" = None

    @property
    def store(self) -> Storage:
        return storage_for(self.root)

    @property
    def seq_len(self) -> int:
        return self.manifest["seq_len"]

    @property
    def chat(self) -> bool:
        """A chat build: its shards hold a loss_mask column."""
        return S.LOSS_MASK in self.manifest.get("columns", ())

    def same_tokens(self) -> tuple:
        """What must agree between the sources of one repack: the tokenizer and the ids it gave."""
        m = self.manifest
        tok = m["tokenizer"]
        return (tok.get("fingerprint"), m["vocab_size"], m["dtype"], m["eos_id"], m["pad_id"], self.chat,
                m["settings"].get("eos"), str(m["settings"].get("around_text")))


def open_source(path: str, vocab_size: int | None = None, eos_id: int | None = None) -> Source:
    """Open the finished build at ``path`` (its holdout too); ``PackerError`` naming what is wrong:
    no build there, an unfinished one (no manifest), a damaged manifest. A Megatron prefix or a folder of
    token arrays is opened as a build (foreign.py; ``vocab_size``/``eos_id`` where the store does not say)."""
    from .foreign import foreign_source, is_foreign

    if is_foreign(path):
        root, m, digest, held = foreign_source(path, vocab_size, eos_id)
        return Source(root, m, digest, None if held is None else Source(*held[:3]))
    store = storage_for(path)
    data = S.read_manifest_bytes(store)
    m = S.parse_manifest(data, store.path(S.MANIFEST))
    held = None
    if isinstance(m.get("holdout"), dict):
        sub = path.rstrip("/") + "/" + str(m["holdout"].get("path", "holdout"))
        try:
            held = open_source(sub)
        except PackerError as e:
            raise ShardError(f"{path}: its holdout build is missing or damaged ({e})") from None
    return Source(path, m, S.checksum(data), held)


def inside(path: str, build: str) -> bool:
    """Whether local ``path`` is the build folder ``build`` or lies inside it: a repack or an export written
    there would be files its build's manifest does not name (``packer stats`` reports each). URIs: never."""
    if is_uri(path) or is_uri(build):
        return False
    p, b = os.path.realpath(path), os.path.realpath(build)
    return p == b or p.startswith(b.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class Documents:
    """The documents of one shard, in their order in the unit (``doc_index``), tokens back to back."""

    tokens: np.ndarray  # (sum(lengths),) in the build's dtype
    lengths: np.ndarray  # (documents,) int64, each >= 1
    mask: np.ndarray | None  # chat builds: (sum(lengths),) uint8, 1 = trained on; else None


@dataclass(frozen=True)
class Pieces:
    """The documents of one shard as they lie in it: runs of the mapped file, in document order."""

    lengths: np.ndarray  # (documents,) int64, each >= 1
    tokens: Scattered  # the runs of tokens that hold the documents back to back
    mask: Scattered | None  # chat builds: the loss mask's runs, the same geometry


def shard_documents(store: Storage, entry: dict, seq_len: int, dtype: str, chat: bool) -> Documents:
    """Read one shard of a finished build (checked against its manifest ``entry``: size, checksum, counts)
    and join each document's pieces again, tokens back to back."""
    return joined(shard_pieces(store, entry, seq_len, dtype, chat))


def joined(p: Pieces) -> Documents:
    """The pieces copied back to back: each document's tokens (and loss mask) in one array."""
    return Documents(_copy(p.tokens), p.lengths, None if p.mask is None else _copy(p.mask))


def shard_pieces(store: Storage, entry: dict, seq_len: int, dtype: str, chat: bool) -> Pieces:
    """``shard_documents`` without the copy: where each document's pieces lie in the (mapped) shard."""
    if "foreign" in entry:  # a unit of a Megatron or token-array store (foreign.py)
        from .foreign import foreign_pieces

        return Pieces(*foreign_pieces(entry), None)
    return _join(shard_rows(store, entry, seq_len, dtype, chat), store.path(entry["path"]), seq_len, chat, entry)


def shard_rows(store: Storage, entry: dict, seq_len: int, dtype: str, chat: bool):
    """One shard of a finished build as its packed rows (a ``pyarrow.Table``, zero-copy over the shard's
    bytes), checked against its manifest ``entry`` (size, checksum) and its schema: what ``shard_pieces``
    joins, and what ``packer export --format mds`` writes row by row."""
    path = entry["path"]
    where = store.path(path)
    try:
        data = store.map(path) if entry["bytes"] else b""
    except (OSError, ValueError) as e:
        raise ShardError(f"{where}: cannot read shard ({first_line(e)})") from None
    if len(data) != entry["bytes"] or S.checksum(data) != entry[S.CHECKSUM]:
        raise ShardError(f"{where}: shard differs from its manifest entry ({len(data):,} bytes, manifest says "
                         f"{entry['bytes']:,}, or its {S.CHECKSUM} differs): shard is corrupt; packer stats names the damage")
    table = S.open_shard_buffer(data, where, seq_len, dtype)
    if chat and S.LOSS_MASK not in table.column_names:
        raise ShardError(f"{where}: a chat build's shard without its {S.LOSS_MASK} column: shard is corrupt")
    return table


def _join(table, where: str, L: int, chat: bool, entry: dict) -> Pieces:
    """Pieces sorted by (document, offset); checked to join up exactly."""
    ids, masks, parts = [], [], []  # per record batch: flat token (and mask) views; piece arrays
    for b, batch in enumerate(table.to_batches()):
        ids.append(values(batch.column("input_ids").flatten()))
        if chat:
            masks.append(values(batch.column(S.LOSS_MASK).flatten()))
        lens = batch.column("doc_lens")
        offsets = values(lens.offsets).astype(np.int64)
        offsets -= offsets[0]
        ln = values(lens.flatten()).astype(np.int64)
        row = np.repeat(np.arange(batch.num_rows, dtype=np.int64), np.diff(offsets))
        start = np.cumsum(ln) - ln
        slot = start - start[offsets[row]]
        parts.append((np.full(len(ln), b), row * L + slot, ln, values(batch.column("doc_index").flatten()),
                      values(batch.column("doc_offset").flatten())))
    if not parts:
        none = np.zeros(0, np.int64)
        return Pieces(none, Scattered([np.zeros(0, np.uint16)], none, none, none),
                      Scattered([np.zeros(0, np.uint8)], none, none, none) if chat else None)
    bat, src, ln, doc, off = (np.concatenate(x) for x in zip(*parts))
    doc, off = doc.astype(np.int64), off.astype(np.int64)
    order = np.lexsort((off, doc))
    bat, src, ln, doc, off = bat[order], src[order], ln[order], doc[order], off[order]
    n_docs = int(doc[-1]) + 1 if len(doc) else 0
    lengths = np.bincount(doc, weights=ln, minlength=n_docs).astype(np.int64)
    first = np.r_[True, doc[1:] != doc[:-1]] if len(doc) else np.zeros(0, bool)
    run = np.cumsum(ln) - ln
    expect = run - run[np.flatnonzero(first)][np.cumsum(first) - 1]  # each piece's offset if they join up
    if (n_docs != entry["documents"] or (lengths < 1).any() or (off != expect).any()
            or int(lengths.sum()) != entry["tokens"]):
        raise ShardError(f"{where}: its document pieces do not join up (doc_index / doc_offset / doc_lens disagree "
                         "with each other or with the manifest): shard is corrupt")
    return Pieces(lengths, Scattered(ids, bat, src, ln), Scattered(masks, bat, src, ln) if chat else None)


def values(arr) -> np.ndarray:
    """A primitive Arrow array's values as a NumPy view of its buffer. (pyarrow's ``to_numpy`` imports pandas
    on first use: 1.0 s of a 3.4 s export of 242 MB on the 2-core machine.)"""
    return np.frombuffer(arr.buffers()[1], np.dtype(str(arr.type)))[arr.offset:arr.offset + len(arr)]


def _copy(runs: Scattered) -> np.ndarray:
    """The runs copied back to back: one slice copy per run."""
    out = np.empty(int(runs.length.sum()), dtype=runs.flat[0].dtype)
    at = 0
    for b, s, n in zip(runs.chunk.tolist(), runs.start.tolist(), runs.length.tolist()):
        out[at:at + n] = runs.flat[b][s:s + n]
        at += n
    return out
