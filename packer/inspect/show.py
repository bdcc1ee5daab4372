"""Show: one packed row decoded back to text, document boundaries and padding marked.

``packer show OUT ROW`` prints what the model will see in row ``ROW`` (counted
over the whole build, in manifest order): every piece with a marker line

    [doc UNIT:INDEX piece K/N, offset O, L tokens; other pieces in rows ...]

then its text, then ``[padding: P slots of pad id X]``. In a chat build (a
``loss_mask`` column) the trained tokens are shown between ``⟦`` and ``⟧``.
Rows are located from
the manifest and read by memory map; only one shard's small piece columns and
one row of tokens are touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import shards as S
from ..errors import PackerError, ShardError
from ..io import storage_for
from ..tokenize import BYTES_EOS, BYTES_NAME, resolve_tokenizer

BYTES_EOS_TEXT = "<eos>"  # how the built-in tokenizer's end-of-document id is printed


@dataclass(frozen=True)
class Piece:
    unit: int
    doc: int  # index of the document within its unit
    k: int  # 1-based rank of this piece among the document's pieces (by offset)
    of: int  # pieces the document has
    offset: int  # first token of the piece within the document
    ids: np.ndarray  # (length,) token ids
    other_rows: tuple[int, ...]  # global rows holding the document's other pieces
    mask: np.ndarray | None = None  # (length,) uint8 loss mask (chat builds), 1 = trained on


@dataclass(frozen=True)
class RowView:
    row: int  # global row
    rows: int  # rows in the build
    path: str  # shard, relative to the build folder
    local_row: int
    shard_rows: int
    seq_len: int
    pieces: tuple[Piece, ...]
    pad_id: int
    padding: int  # slots after the last piece
    pad_ids: np.ndarray  # (padding,) what those slots hold (pad_id unless damaged)


def read_row(out: str, row: int) -> RowView:
    """Locate global ``row`` of the build at ``out`` (a folder or a URI) and read its pieces;
    raise ``PackerError`` if it does not exist."""
    store = storage_for(out)
    x = S.open_index(store)  # the shard list as columns (index.arrow, or the manifest's list)
    m, total = x.head, x.total_rows
    if not 0 <= row < total:
        held = f"{total:,} rows (0..{total - 1})" if total else "no rows"
        raise PackerError(f"row {row} does not exist: {out} holds {held}")
    k = int(x.starts.searchsorted(row, "right")) - 1
    first, rel = int(x.starts[k]), x.path(k)
    e = {"path": rel, "rows": int(x.rows[k]), "unit": x.unit(k)}
    local = row - first
    seq_len = int(m["seq_len"])
    if not store.inside(rel):
        raise ShardError(f"{store.path(S.MANIFEST)}: shard path {rel!r} points outside the build folder")
    try:
        data = store.map(rel)  # a local shard memory-mapped (a regular file: never blocks on a FIFO); a remote one fetched whole
    except FileNotFoundError:
        raise ShardError(f"{store.path(rel)}: shard is missing") from None
    except (OSError, ValueError) as err:
        if getattr(err, "strerror", None) == "not a regular file":
            raise ShardError(f"{store.path(rel)}: not a regular file (a FIFO, device or folder): shard is corrupt") from None
        raise ShardError(f"{store.path(rel)}: cannot read shard ({err})") from None
    path = store.path(e["path"])
    table = S.open_shard_buffer(data, path, seq_len, m["dtype"])
    if local >= table.num_rows:
        raise PackerError(f"{e['path']}: holds {table.num_rows} rows, the manifest says {e['rows']}: run packer stats {out}")

    def flat(name):
        """(offsets from 0, values) of a list column, its offsets checked before NumPy follows them."""
        col = table.column(name).combine_chunks()
        o, v = np.asarray(col.offsets, dtype=np.int64), np.asarray(col.values)
        problem = S.boundary_problem(o, len(v), None, seq_len, column=name)
        if problem:
            raise ShardError(f"{path}: {problem}")
        return o - o[0], v[o[0]:o[-1]].astype(np.int64)

    offs, lens = flat("doc_lens")
    problem = S.boundary_problem(offs, len(lens), lens, seq_len)  # the shared bounds: pieces of 1..seq_len, rows <= seq_len
    if problem:
        raise ShardError(f"{path}: {problem}")
    (o_doc, docs), (o_off, starts) = flat("doc_index"), flat("doc_offset")
    if not (np.array_equal(o_doc, offs) and np.array_equal(o_off, offs)):
        raise ShardError(f"{path}: doc_lens, doc_index and doc_offset have different numbers of pieces: shard is corrupt")
    piece_row = np.repeat(np.arange(table.num_rows), np.diff(offs))
    ids = np.asarray(table.column("input_ids")[local].values)
    mask = np.asarray(table.column(S.LOSS_MASK)[local].values) if S.LOSS_MASK in table.schema.names else None
    unit = e["unit"] or 0
    pieces, slot = [], 0
    for p in range(offs[local], offs[local + 1]):
        same = np.nonzero(docs == docs[p])[0]
        rank = int((starts[same] < starts[p]).sum()) + 1
        others = sorted({int(r) + first for r in piece_row[same] if r != local})
        n = int(lens[p])
        pieces.append(Piece(unit, int(docs[p]), rank, len(same), int(starts[p]), ids[slot : slot + n], tuple(others),
                            None if mask is None else mask[slot : slot + n]))
        slot += n
    return RowView(row, total, e["path"], local, table.num_rows, seq_len, tuple(pieces), int(m["pad_id"]),
                   max(0, seq_len - slot), ids[slot:])


class Decoder:
    """Token ids to text with the build's tokenizer; ``why`` says why it could not be loaded."""

    def __init__(self, manifest: dict, override: str | None = None):
        tok = manifest["tokenizer"]
        self.name = override or tok["name"]
        self.kind = tok["kind"] if override is None else ("bytes" if override == BYTES_NAME else "hf")
        self.why: str | None = None  # set when decoding is impossible: ids are shown instead
        self.warning: str | None = None
        self._hf = None
        if self.kind == "bytes":
            fingerprint = resolve_tokenizer(None).fingerprint
        else:
            try:
                info = resolve_tokenizer(self.name, eos=False, follows=tok.get("tokenizer_follows", "transformers"))
            except PackerError as e:
                self.why = f"cannot load tokenizer {self.name!r} to decode ({e}); showing token ids (pass --tokenizer PATH)"
                return
            from tokenizers import Tokenizer

            self._hf = Tokenizer.from_str(info.json)
            fingerprint = info.fingerprint
        if fingerprint != tok.get("fingerprint"):
            self.warning = (f"tokenizer {self.name} is not the one this build was made with (fingerprint differs): "
                            "the text below may be wrong")

    def decode(self, ids: np.ndarray) -> str:
        if self.kind == "bytes":
            parts, cur = [], bytearray()
            for i in ids.tolist():
                if i == BYTES_EOS:
                    parts.append(cur.decode("utf-8", "backslashreplace") + BYTES_EOS_TEXT)
                    cur = bytearray()
                elif i < 256:
                    cur.append(i)
                else:
                    parts.append(cur.decode("utf-8", "backslashreplace") + f"<id {i}>")
                    cur = bytearray()
            return "".join(parts) + cur.decode("utf-8", "backslashreplace")
        return self._hf.decode(ids.tolist(), skip_special_tokens=False)


def render(view: RowView, decoder: Decoder | None, ids: bool = False) -> list[str]:
    """Lines to print. With ``ids`` (or no usable decoder) each piece shows its token ids."""
    used = sum(len(p.ids) for p in view.pieces)
    where = (f"in {view.path}" if view.local_row == view.row and view.shard_rows == view.rows
             else f"({view.path}, its row {view.local_row:,} of {view.shard_rows:,})")
    pieces = f"{len(view.pieces)} piece" + ("" if len(view.pieces) == 1 else "s")
    lines = [
        f"row {view.row:,} of {view.rows:,} {where}; "
        f"{pieces}, {used:,} tokens, {view.padding:,} padding of {view.seq_len:,} slots",
    ]
    as_ids = ids or decoder is None or decoder.why is not None
    if decoder is not None and decoder.why:
        lines.append(f"note: {decoder.why}")
    if decoder is not None and decoder.warning and not as_ids:
        lines.append(f"warning: {decoder.warning}")
    if not as_ids:
        lines.append("(marker lines start on a new line: a line break is added after text that does not end with one)")
    if any(p.mask is not None for p in view.pieces):
        trained = sum(int(p.mask.sum()) for p in view.pieces)
        lines.append(f"(loss_mask: {trained:,} of {used:,} tokens trained on, shown between {OPEN} and {CLOSE})")
    for p in view.pieces:
        where = f"; other pieces in rows {_runs(p.other_rows)}" if p.other_rows else ""
        lines.append(f"[doc {p.unit}:{p.doc} piece {p.k}/{p.of}, offset {p.offset:,}, {len(p.ids):,} tokens{where}]")
        if as_ids:
            lines.append(" ".join(_marked(p, lambda ids: " ".join(map(str, ids.tolist())))))
        elif p.mask is not None:
            text = "".join(_marked(p, decoder.decode))
            lines.append(text[:-1] if text.endswith("\n") else text)
        else:
            text = decoder.decode(p.ids)
            lines.append(text[:-1] if text.endswith("\n") else text)
    if view.padding:
        odd = view.pad_ids[view.pad_ids != view.pad_id]
        extra = f" ({len(odd)} of them NOT pad: damaged, run packer stats)" if len(odd) else ""
        lines.append(f"[padding: {view.padding:,} slots of pad id {view.pad_id}{extra}]")
    else:
        lines.append("[padding: none, the row is full]")
    return lines


OPEN, CLOSE = "⟦", "⟧"  # around trained tokens (chat builds)


def _marked(p: Piece, show) -> list[str]:
    """The piece as runs of equal mask, each shown by ``show(ids)``, trained runs between OPEN and CLOSE."""
    if p.mask is None or not len(p.ids):
        return [show(p.ids)]
    cut = np.flatnonzero(np.diff(p.mask.astype(np.int8))) + 1
    out = []
    for a, b in zip(np.r_[0, cut], np.r_[cut, len(p.ids)]):
        s = show(p.ids[a:b])
        out.append(f"{OPEN}{s}{CLOSE}" if p.mask[a] else s)
    return out


def _runs(rows: tuple[int, ...]) -> str:
    """"3, 7-9, 12" for rows 3, 7, 8, 9, 12."""
    out, i = [], 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and rows[j + 1] == rows[j] + 1:
            j += 1
        out.append(str(rows[i]) if i == j else f"{rows[i]}-{rows[j]}")
        i = j + 1
    return ", ".join(out)
