"""Property-based: for random small corpora and settings, the shards hold exactly the input's tokens."""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packer import BuildConfig, build

from tests.conftest import expected_tokens, read_documents

texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), min_codepoint=1), min_size=1, max_size=300
).filter(lambda t: not t.startswith("\ufeff"))  # a leading BOM is dropped from .txt: tested in the awkward matrix
files = st.lists(
    st.tuples(st.sampled_from(["txt", "jsonl", "jsonl.gz", "jsonl.zst", "parquet"]), st.lists(texts, min_size=1, max_size=12)),
    min_size=1,
    max_size=5,
)


def write(root: Path, corpus) -> list[str]:
    """Write the corpus; return its documents in reading order."""
    docs = []
    for i, (fmt, ts) in enumerate(corpus):
        name = f"f{i:02d}"
        if fmt == "txt":
            # One document per file: a folder of txt files, one per text.
            d = root / name
            d.mkdir()
            for j, t in enumerate(ts):
                (d / f"{j:02d}.txt").write_bytes(t.encode())
            docs += ts
            continue
        blob = "".join(json.dumps({"text": t}) + "\n" for t in ts).encode()
        if fmt == "jsonl":
            (root / f"{name}.jsonl").write_bytes(blob)
        elif fmt == "jsonl.gz":
            (root / f"{name}.jsonl.gz").write_bytes(gzip.compress(blob))
        elif fmt == "jsonl.zst":
            (root / f"{name}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(blob))
        else:
            pq.write_table(pa.table({"text": ts}), root / f"{name}.parquet", row_group_size=3)
        docs += ts
    return docs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    corpus=files,
    seq_len=st.integers(2, 80),
    mode=st.sampled_from(["bfd", "concat"]),
    eos=st.booleans(),
    unit_bytes=st.sampled_from([4096, 1 << 20]),
)
def test_shards_hold_exactly_the_input_tokens(corpus, seq_len, mode, eos, unit_bytes):
    tmp = Path(tempfile.mkdtemp())
    try:
        root = tmp / "in"
        root.mkdir()
        docs = write(root, corpus)
        out = str(tmp / "out")
        build(BuildConfig.of(inputs=(str(root),), out=out, seq_len=seq_len, pack=mode, eos=eos, workers=1, unit_bytes=unit_bytes))
        got, m = read_documents(out)
        want = [w for w in expected_tokens(docs, None, eos=eos) if w]  # empty docs never reach here (min_size=1)
        assert [g.tolist() for g in got] == want
        assert m["totals"]["skipped"] == {}
        assert m["totals"]["tokens"] == sum(map(len, want))
    finally:
        shutil.rmtree(tmp)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpus=files, seq_len=st.integers(2, 80), mode=st.sampled_from(["bfd", "concat"]))
def test_worker_count_never_changes_the_bytes(corpus, seq_len, mode):
    tmp = Path(tempfile.mkdtemp())
    try:
        root = tmp / "in"
        root.mkdir()
        write(root, corpus)
        outs = []
        for w in (1, 2):
            out = tmp / f"out{w}"
            build(BuildConfig.of(inputs=(str(root),), out=str(out), seq_len=seq_len, pack=mode, workers=w, unit_bytes=4096))
            outs.append({p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
        assert outs[0] == outs[1]
    finally:
        shutil.rmtree(tmp)
