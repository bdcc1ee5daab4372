"""Helpers of the tests of packer/formats/: write inputs, build them with the byte tokenizer, read back
what the build kept and what it counted, or read a file's records without a build."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pyarrow as pa
import zstandard

from packer import BuildConfig, build
from packer.formats import discover, plan_slices, read_slice

from tests.conftest import read_documents

COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress, ".zst": zstandard.compress}


def run(tmp_path, files: dict[str, bytes], **kw):
    """Write ``files`` under tmp/in, build with the byte tokenizer; return (texts as bytes, manifest)."""
    root = tmp_path / "in"
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    out = str(tmp_path / "out")
    build(BuildConfig.of(inputs=kw.pop("inputs", (str(root),)), out=out, seq_len=kw.pop("seq_len", 64), workers=1, **kw))
    docs, m = read_documents(out)
    texts = []
    for d in docs:
        assert d[-1] == 256, "every document ends with EOS"
        texts.append(bytes(d[:-1].astype("uint8").tolist()))
    return texts, m


def jl(*objs) -> bytes:
    return b"".join((o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n" for o in objs)


def skipped(m) -> dict:
    return m["totals"]["skipped"]


def accounted(m, records: int) -> None:
    """Every record written is a document or a counted skip."""
    assert m["totals"]["documents"] + sum(skipped(m).values()) == records


def arrow_stream(path, batches: list[pa.RecordBatch]) -> None:
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, batches[0].schema) as w:
        for b in batches:
            w.write_batch(b)


def records(path, target: int = 1 << 30) -> list:
    """The records of the file at ``path``, read slice by slice (slices of about ``target`` bytes)."""
    return [r for sl, _ in plan_slices(discover([str(path)]).files, target) for r in read_slice(sl)]
