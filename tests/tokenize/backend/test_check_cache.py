"""The records of passed checks (packer/tokenize/backend/check_cache.py): read back only whole, written atomically
or not at all, and never an error."""

import os

import pytest

pytest.importorskip("tiktoken")

from packer.tokenize.backend import check_cache as C  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "c"))
    return tmp_path / "c"


def test_an_input_record_round_trips_under_its_own_key(cache):
    a, b = C.input_key(["fp", "tiktoken", 1]), C.input_key(["fp", "fastokens", 1])
    assert a != b and a == C.input_key(["fp", "tiktoken", 1])
    assert C.load_input(a) is None
    C.store_input(a, 62, 185_769)
    assert C.load_input(a) == (62, 185_769) and C.load_input(b) is None
    assert [n for n in os.listdir(cache / "input-checks") if n.startswith(".tmp-")] == []  # nothing half-written


@pytest.mark.parametrize("raw", [b"{", b"", b"null", b'{"texts": 1}', b'{"texts": 1, "tokens": 2, "x": 3}',
                                 b'{"texts": 1.5, "tokens": 2}', b'{"texts": false, "tokens": 2}', b"\x80\x81"])
def test_a_damaged_input_record_reads_as_none(cache, raw):
    key = C.input_key(["x"])
    C.store_input(key, 1, 2)
    (cache / "input-checks" / f"{key}.json").write_bytes(raw)
    assert C.load_input(key) is None


def test_off_and_unwritable_folders_record_nothing_and_raise_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", "off")
    C.store_input("k", 1, 2)
    assert C.load_input("k") is None and C.folder("input-checks") is None
    (tmp_path / "f").write_text("a file")
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "f" / "under"))
    C.store_input("k", 1, 2)
    assert C.load_input("k") is None
    assert C.read_json(str(tmp_path), "absent.json") is None and (tmp_path / "f").read_text() == "a file"
