"""Token stores as repack input (packer/repacking/foreign.py): a Megatron indexed dataset and OLMo token arrays
that packer export wrote repack to the very build they came from; another store is packed whole, in order;
a store that does not hold together is one line."""

from __future__ import annotations

import os
import shutil
import struct

import numpy as np
import pytest

from packer import PackerError, export, repack

from ..conftest import invoke, read_documents
from .conftest import shard_bytes


@pytest.mark.parametrize("fmt,name", [("megatron", "mg/data"), ("olmo", "olmo")])
def test_build_export_repack_gives_the_build_again(fresh, tmp_path, fmt, name):
    dest = str(tmp_path / name)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    export(fresh[1024], dest, format=fmt)
    out = str(tmp_path / "again")
    repack(dest, out, seq_len=1024)
    assert shard_bytes(out) == shard_bytes(fresh[1024])  # the same tokens, rows and boundaries, unit for unit
    assert shard_bytes(out + "/holdout") == shard_bytes(fresh[1024] + "/holdout")
    further = str(tmp_path / "longer")
    repack(dest, further, seq_len=2048)  # and any other length, as from the build itself
    assert shard_bytes(further) == shard_bytes(fresh[2048])


def test_a_megatron_store_packer_did_not_write_is_packed_whole_in_order(fresh, tmp_path):
    os.makedirs(tmp_path / "mg")
    dest = str(tmp_path / "mg" / "data")
    export(fresh[512], dest, format="megatron")
    os.remove(dest + ".packer.json")  # as Megatron's own preprocess_data.py leaves it
    with pytest.raises(PackerError, match="give --vocab-size"):
        repack(dest, str(tmp_path / "o"), seq_len=1024)
    out = str(tmp_path / "o2")
    res = invoke("repack", dest, out, "--seq-len", "1024", "--vocab-size", "257", "--eos-id", "256", "-q")
    assert res.exit_code == 0, res.output
    assert invoke("stats", out).exit_code == 0
    got, m = read_documents(out)
    want, _ = read_documents(fresh[512])
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
    assert m["vocab_size"] == 257 and m["eos_id"] == 256 and m["tokenizer"]["kind"] == "megatron"


def test_token_arrays_without_a_record_need_their_eos_id(fresh, tmp_path):
    dest = str(tmp_path / "olmo")
    export(fresh[512], dest, format="olmo")
    os.remove(os.path.join(dest, "packer-export.json"))
    shutil.rmtree(os.path.join(dest, "val"))
    with pytest.raises(PackerError, match="--eos-id"):
        repack(dest, str(tmp_path / "o"), seq_len=1024, vocab_size=257)
    out = str(tmp_path / "o2")
    repack(dest, out, seq_len=1024, vocab_size=257, eos_id=256)
    got, _ = read_documents(out)
    want, _ = read_documents(fresh[512])
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


def test_an_index_that_does_not_match_its_bin_is_one_line(fresh, tmp_path):
    os.makedirs(tmp_path / "mg")
    dest = str(tmp_path / "mg" / "data")
    export(fresh[512], dest, format="megatron")
    with open(dest + ".bin", "ab") as f:
        f.write(b"\0\0")  # a .bin longer than its index says
    res = invoke("repack", dest, str(tmp_path / "o"), "--seq-len", "1024")
    assert res.exit_code == 2 and "is not a Megatron index that matches" in res.output and res.output.count("\n") == 1, res.output
    with open(dest + ".idx", "r+b") as f:
        f.seek(9)
        f.write(struct.pack("<Q", 7))  # an index version packer does not know
    res = invoke("repack", dest, str(tmp_path / "o"), "--seq-len", "1024")
    assert res.exit_code == 2 and "version 7" in res.output
    assert not os.path.exists(tmp_path / "o" / "manifest.json")
