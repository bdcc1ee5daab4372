"""Token stores packer did not write, as repack input: Megatron's indexed dataset (``PREFIX.bin`` + ``.idx``)
and OLMo-core / dolma token arrays (a folder of raw ``part-*.npy``, documents ended by EOS).

Each is opened as a ``Source`` whose "shards" are runs of consecutive documents (``foreign`` in the entry
says where they lie), so a repack packs them with packer's best fit into packer shards like any build. A
store that ``packer export`` wrote carries what it was made from (``PREFIX.packer.json``, or the folder's
``packer-export.json``: the build's manifest head and its documents per unit): the units are the build's,
and ``packer repack`` at the build's length gives the build's shards again, byte for byte. Another store
(Megatron's own preprocess_data.py, dolma) is cut into units of about ``UNIT_TOKENS`` tokens, and needs
``vocab_size`` (and for token arrays ``eos_id``) from the caller: the files do not say.
"""

from __future__ import annotations

import glob
import json
import os
import struct

import numpy as np

from .. import shards as S
from ..errors import PackerError
from ..pipeline import Scattered

UNIT_TOKENS = 1 << 25  # tokens per unit of a store that records no units (about a build's 64 MB unit)
MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}  # megatron-core's DType
MARK = "packer-export.json"


def is_foreign(path: str) -> bool:
    """Whether ``path`` names a Megatron prefix (or its .bin/.idx) or a folder of token arrays."""
    return _megatron_prefix(path) is not None or _olmo_parts(path) is not None


def foreign_source(path: str, vocab_size: int | None = None, eos_id: int | None = None) -> tuple:
    """The store at ``path`` as what a repack ``Source`` holds: (root, manifest, digest, holdout), the holdout
    (where the export wrote one) a tuple of the same shape or None (source.open_source makes the Sources)."""
    prefix = _megatron_prefix(path)
    if prefix is not None:
        info = _read_json(prefix + ".packer.json")
        docs, store_digest = _megatron_documents(prefix)
        held = None
        if info and info["source"].get("holdout") and os.path.exists(prefix + "_val.idx"):
            held_docs, held_digest = _megatron_documents(prefix + "_val")
            held = _opened(prefix + "_val", _manifest(held_docs, _held(info["source"]), info, vocab_size, eos_id,
                                                    "megatron", prefix + "_val"), held_digest)
        return _opened(prefix, _manifest(docs, info and info["source"], info, vocab_size, eos_id, "megatron", prefix),
                      store_digest, held)
    parts = _olmo_parts(path)
    info = _read_json(os.path.join(path, MARK))
    if info and info.get("label_mask_paths") or info and info.get("train", {}).get("label_mask_paths"):
        raise PackerError(f"{path} holds a chat build's label masks: repack that build itself (its loss_mask is "
                          "not read back from token arrays)")
    src = info and info["source"]
    eos = eos_id if eos_id is not None else (src or {}).get("eos_id")
    if eos is None:
        raise PackerError(f"{path}: token arrays split into documents at EOS: give --eos-id (the files do not say it)")
    vocab = (src or {}).get("vocab_size") or vocab_size
    if vocab is None:
        raise PackerError(f"{path}: give --vocab-size (the token arrays do not say it)")
    docs = _olmo_documents(path, parts, olmo_dtype(vocab), eos)
    held = None
    if src and src.get("holdout") and _olmo_parts(os.path.join(path, "val")):
        sub = os.path.join(path, "val")
        held = _opened(sub, _manifest(_olmo_documents(sub, _olmo_parts(sub), olmo_dtype(vocab), eos),
                                     _held(src), info, vocab, eos, "olmo", sub), docs.digest)
    return _opened(path, _manifest(docs, src, info, vocab, eos, "olmo", path), docs.digest, held)


def _held(src: dict) -> dict:
    """The recorded head of an export's holdout: the build's, with the holdout's settings and units."""
    h = src["holdout"]
    return {**src, "settings": h["settings"], "units": h["units"], "holdout": None}


class _Docs:
    """Documents of a store: per document its file index, first token and length; the files (dtype)."""

    def __init__(self, files, dtype, file_of, start, length, digest):
        self.files, self.dtype, self.file_of, self.start, self.length, self.digest = files, dtype, file_of, start, length, digest


def _megatron_prefix(path: str) -> str | None:
    p = path[:-4] if path.endswith((".idx", ".bin")) else path
    return p if os.path.isfile(p + ".idx") and os.path.isfile(p + ".bin") else None


def _olmo_parts(path: str) -> list[str] | None:
    parts = sorted(glob.glob(os.path.join(glob.escape(path), "part-*.npy"))) if os.path.isdir(path) else []
    return parts or None


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise PackerError(f"{path}: unreadable ({e})") from None


def _megatron_documents(prefix: str) -> tuple[_Docs, str]:
    """The sequences of ``PREFIX.idx``, checked against ``PREFIX.bin``: one line naming the file if not."""
    idx = prefix + ".idx"
    with open(idx, "rb") as f:
        data = f.read()
    bad = f"{idx} is not a Megatron index that matches {prefix}.bin"
    if len(data) < 34 or data[:9] != MEGATRON_MAGIC:
        raise PackerError(f"{idx}: not a Megatron indexed dataset index (no MMIDIDX header)")
    version, code, n, d = struct.unpack_from("<QBQQ", data, 9)
    if version != 1 or code not in MEGATRON_DTYPES:
        raise PackerError(f"{idx}: version {version}, dtype code {code}: not one packer reads (version 1; "
                          f"codes {sorted(MEGATRON_DTYPES)})")
    dtype = np.dtype(MEGATRON_DTYPES[code])
    if len(data) != 34 + 4 * n + 8 * n + 8 * d:
        raise PackerError(f"{bad}: {len(data):,} bytes for {n:,} sequences and {d:,} document indices")
    lengths = np.frombuffer(data, np.int32, n, 34).astype(np.int64)
    pointers = np.frombuffer(data, np.int64, n, 34 + 4 * n)
    size = os.path.getsize(prefix + ".bin")
    ends = np.cumsum(lengths) * dtype.itemsize
    if (lengths < 0).any() or (n and (pointers != ends - lengths * dtype.itemsize).any()) or (ends[-1] if n else 0) != size:
        raise PackerError(f"{bad}: its sequence lengths and pointers do not tile the .bin ({size:,} bytes)")
    keep = lengths > 0
    return _Docs([prefix + ".bin"], dtype, np.zeros(int(keep.sum()), np.int64), pointers[keep] // dtype.itemsize,
                 lengths[keep], S.checksum(data)), S.checksum(data)


def olmo_dtype(vocab_size: int) -> np.dtype:
    """OLMo-core's token dtype (``NumpyDatasetConfig.get_dtype``): the smallest unsigned type that holds
    ``vocab_size - 1`` (what ``packer export --format olmo`` writes, and what is read back here)."""
    for d in (np.uint8, np.uint16, np.uint32, np.uint64):
        if vocab_size - 1 <= np.iinfo(d).max:
            return np.dtype(d)
    raise PackerError(f"vocab_size {vocab_size} is too large for OLMo-core's dtypes")


def _olmo_documents(path: str, parts: list[str], dtype: np.dtype, eos: int) -> _Docs:
    """Documents of token arrays: each run ending with EOS (a file's tail without one is a document too)."""
    file_of, starts, lengths = [], [], []
    for i, p in enumerate(parts):
        size = os.path.getsize(p)
        if size % dtype.itemsize:
            raise PackerError(f"{p}: {size:,} bytes is not a whole number of {dtype.name} tokens: not a token array "
                              "of this vocabulary")
        a = np.memmap(p, dtype=dtype, mode="r") if size else np.zeros(0, dtype)
        ends = np.flatnonzero(a == eos) + 1
        if len(a) and (not len(ends) or ends[-1] != len(a)):
            ends = np.append(ends, len(a))
        st = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        file_of.append(np.full(len(ends), i, np.int64))
        starts.append(st)
        lengths.append(ends - st)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
    digest = S.checksum(json.dumps([[os.path.basename(p), os.path.getsize(p)] for p in parts]).encode())
    return _Docs(parts, dtype, cat(file_of), cat(starts), cat(lengths), digest)


def _units(docs: _Docs, counts: list[int] | None, where: str) -> list[tuple[int, int]]:
    """(first document, documents) of each unit: the recorded counts, else about UNIT_TOKENS tokens each."""
    n = len(docs.length)
    if counts is not None:
        if sum(counts) != n:
            raise PackerError(f"{where} holds {n:,} documents where its export recorded {sum(counts):,} (a document "
                              "holding the EOS id inside it is split there): repack the build itself")
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
        return list(zip(firsts, counts))
    ends = np.cumsum(docs.length)
    cuts = np.searchsorted(ends, np.arange(UNIT_TOKENS, int(ends[-1]) if n else 0, UNIT_TOKENS), side="left") + 1
    bounds = np.unique(np.concatenate([[0], cuts, [n]])).tolist()
    return [(a, b - a) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _manifest(docs: _Docs, src: dict | None, info: dict | None, vocab: int | None, eos: int | None, kind: str,
              where: str) -> dict:
    """A manifest for the store: the build's head where the export recorded it, else what the caller gave."""
    if src is None:
        if vocab is None:
            raise PackerError(f"{where}: give --vocab-size (a {kind} store does not record its tokenizer)")
        name, pad = f"{kind}:{where}", eos if eos is not None else 0  # (pad: never read as a token; EOS, as packer pads)
        src = {"seq_len": 0, "dtype": S.dtype_for_vocab(vocab), "pad_id": pad, "eos_id": eos, "vocab_size": vocab,
               "tokenizer": {"name": name, "kind": kind, "vocab_size": vocab, "eos_id": eos, "pad_id": pad,
                             "fingerprint": None, "notes": [f"read from a {kind} store: no tokenizer recorded"]},
               "settings": {"seq_len": 0, "pack": "bfd", "eos": eos is not None, "tokenizer": name,
                            "tokenizer_fingerprint": None}}
    shards = []
    for k, (first, n) in enumerate(_units(docs, src.get("units"), where)):
        sl = slice(first, first + n)
        ln = docs.length[sl]
        shards.append({"path": f"{kind}-unit-{k:06d}", "documents": n, "tokens": int(ln.sum()),
                       "bytes": int(ln.sum()) * docs.dtype.itemsize, S.CHECKSUM: f"{docs.digest}:{k}",
                       "foreign": {"files": docs.files, "dtype": docs.dtype.str, "file_of": docs.file_of[sl],
                                   "start": docs.start[sl], "length": ln}})
    tok = int(docs.length.sum())
    totals = {"documents": len(docs.length), "tokens": tok, "skipped": {}, "input_files": len(docs.files),
              "input_bytes": tok * docs.dtype.itemsize, "ignored_files": 0}
    held = src.get("holdout")
    return {k: src[k] for k in ("seq_len", "dtype", "pad_id", "eos_id", "vocab_size", "tokenizer", "settings")} | {
        "totals": totals, "shards": shards,
        **({"holdout": {k: held[k] for k in ("path", "fraction") if k in held}} if held else {})}


def _opened(root: str, manifest: dict, digest: str, held: tuple | None = None) -> tuple:
    return root, manifest, digest, held


def foreign_pieces(entry: dict) -> tuple[np.ndarray, Scattered]:
    """A foreign unit's documents: (lengths, runs of its memory-mapped files)."""
    f = entry["foreign"]
    dtype = np.dtype(f["dtype"])
    maps = [np.memmap(p, dtype=dtype, mode="r") if os.path.getsize(p) else np.zeros(0, dtype) for p in f["files"]]
    return f["length"], Scattered(maps, f["file_of"], f["start"], f["length"])
