"""The checks every shard reader shares (packer/shards/checks.py): each problem one line, naming the file."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from packer import shards as S
from packer.errors import ShardError


def _shard_bytes(seq_len: int = 8, loss_mask: bool = False) -> bytes:
    tokens = np.arange(2 * seq_len, dtype=np.uint16)
    t = S.shard_table(tokens, seq_len, np.array([0, 1]), np.array([seq_len, 3]), np.array([0, 1]), np.array([0, 0]), 2,
                      np.ones(2 * seq_len, np.uint8) if loss_mask else None)
    return S.table_bytes(t).to_pybytes()


def test_shard_fd_refuses_a_fifo_a_folder_and_a_wrong_size_without_blocking(tmp_path):
    p = tmp_path / "s.arrow"
    p.write_bytes(b"x" * 10)
    os.close(S.shard_fd(str(p), 10))
    with pytest.raises(ShardError, match=r"s\.arrow: shard is truncated \(10 bytes, manifest says 11\)"):
        S.shard_fd(str(p), 11)
    with pytest.raises(ShardError, match=r"s\.arrow: shard is longer than the manifest says"):
        S.shard_fd(str(p), 9)
    with pytest.raises(ShardError, match=r"gone\.arrow: shard is missing"):
        S.shard_fd(str(tmp_path / "gone.arrow"), 1)
    os.mkfifo(tmp_path / "f.arrow")  # opened O_NONBLOCK: no writer needed for the open to return
    os.mkdir(tmp_path / "d.arrow")
    for name in ("f.arrow", "d.arrow"):
        with pytest.raises(ShardError, match=rf"{name}: not a regular file \(a FIFO, device or folder\)"):
            S.shard_fd(str(tmp_path / name), 1)


def test_head_schema_is_the_files_and_damage_is_a_reason():
    data = _shard_bytes()
    assert S.head_schema(data[:4096]).equals(S.schema(8, "uint16"), check_metadata=True)
    for bad, why in ((b"\0" * 6 + data[6:], "no ARROW1 magic"), (data[:8] + b"\0" * 8 + data[16:], "no schema message"),
                     (data[:16] + b"\xee" * 64 + data[80:], "not a readable Arrow file"), (data[:40], "cut in its schema")):
        with pytest.raises(ValueError, match=why):
            S.head_schema(bad[:4096])


def test_schema_problems_of_adds_the_loss_mask_rules():
    chat = pa.ipc.open_file(pa.py_buffer(_shard_bytes(loss_mask=True))).schema
    plain = S.schema(8, "uint16")
    assert S.schema_problems_of(chat, 8, "uint16", needs_mask=True) == []
    assert S.schema_problems_of(plain, 8, "uint16") == []
    assert "no loss_mask column" in S.schema_problems_of(plain, 8, "uint16", needs_mask=True)[0]
    wrong = plain.append(pa.field(S.LOSS_MASK, pa.list_(pa.uint8(), 4)))
    assert "column loss_mask is fixed_size_list<item: uint8>[4]" in S.schema_problems_of(wrong, 8, "uint16")[0]
    assert S.schema_problems_of(plain, 9, "uint16")[0].startswith("schema does not match manifest: column input_ids")


@pytest.mark.parametrize("offsets, lens, want", [
    ([0, 2, 3], [3, 5, 8], None),
    ([0, 3, 2], [3, 5, 8], "doc_lens offsets are out of order"),
    ([0, 2, 4], [3, 5, 8], "doc_lens offsets are out of order"),  # past the values
    ([0, 2, 3], [3, 0, 8], "a doc_lens entry is outside 1..8"),
    ([0, 2, 3], [3, 5, 9], "a doc_lens entry is outside 1..8"),
    ([0, 2, 3], [4, 5, 8], "row 10's doc_lens sum to 9 > seq_len 8"),
])
def test_boundary_problem(offsets, lens, want):
    o, v = np.array(offsets, np.int64), np.array(lens, np.uint32)
    got = S.boundary_problem(o, len(v), None, 8) or S.boundary_problem(o, len(v), v[o[0]:o[-1]], 8, row0=10) \
        if offsets[-1] <= len(lens) else S.boundary_problem(o, len(v), None, 8)
    assert (got is None) if want is None else (want in got), got
    if want is None:
        assert S.row_used(o, v).tolist() == [8, 8]
