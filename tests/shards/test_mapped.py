"""A shard mapped privately and read through its footer (packer/shards/mapped.py), without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from packer.errors import ShardError

from tests.conftest import REPO


def test_rows_are_the_shards_and_no_torch_is_imported(sample_build):
    """In a child that cannot import torch: every row of a shard (tokens, piece lengths, slots used)
    as pyarrow reads it, and the views writable (private pages)."""
    code = f"""
import sys, json, os
sys.modules["torch"] = None  # any import of torch fails
import numpy as np, pyarrow as pa
from typing import NamedTuple
from packer.shards import map_shard
class E(NamedTuple):
    path: str; rows: int; nbytes: int; needs_mask: bool = False
out = {sample_build!r}
m = json.load(open(os.path.join(out, "manifest.json")))
e = m["shards"][0]
p = os.path.join(out, e["path"])
mp = map_shard(E(p, e["rows"], e["bytes"]), p, m["seq_len"], np.dtype(m["dtype"]))
t = pa.ipc.open_file(pa.memory_map(p)).read_all()
ids = t.column("input_ids").combine_chunks().values.to_numpy().reshape(-1, m["seq_len"])
lens = t.column("doc_lens").to_pylist()
for j in range(e["rows"]):
    tok, pl, used, mask = mp.fetch(j)
    assert (tok == ids[j]).all() and pl.tolist() == lens[j] and used == sum(lens[j]) and mask is None, j
assert tok.flags.writeable
print("ok", e["rows"])
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr


def test_a_shard_with_another_row_count_or_no_footer_is_one_line(sample_build, tmp_path):
    from typing import NamedTuple

    from packer.shards import map_shard

    class E(NamedTuple):
        path: str
        rows: int
        nbytes: int
        needs_mask: bool = False

    m = json.load(open(os.path.join(sample_build, "manifest.json")))
    e = m["shards"][0]
    p = os.path.join(sample_build, e["path"])
    dt = np.dtype(m["dtype"])
    with pytest.raises(ShardError, match=rf"{e['rows']} rows, manifest says {e['rows'] + 1}"):
        map_shard(E(p, e["rows"] + 1, e["bytes"]), p, m["seq_len"], dt)
    cut = tmp_path / "cut.arrow"
    data = open(p, "rb").read()
    cut.write_bytes(data[:-7] + b"x" * 7)
    with pytest.raises(ShardError, match=r"cut\.arrow: not an Arrow IPC file \(no ARROW1 magic at the end\)"):
        map_shard(E(str(cut), e["rows"], e["bytes"]), str(cut), m["seq_len"], dt)
    assert pa.ipc.open_file(pa.memory_map(p)).num_record_batches >= 1
