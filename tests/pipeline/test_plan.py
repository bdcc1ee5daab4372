"""packer/pipeline/plan.py: units from slices, the recorded settings, the input stamp, --limit."""

from __future__ import annotations

import pytest

from packer.formats import discover, plan_slices
from packer.pipeline import BuildConfig
from packer.pipeline.plan import input_stamp, limit_slices, plan_units, recorded_settings
from packer.tokenize import resolve_tokenizer
from tests.conftest import write_jsonl


@pytest.fixture
def files(tmp_path):
    for k in range(5):
        write_jsonl(tmp_path / f"{k}.jsonl", [f"file {k} doc {i} " + "x" * (i % 90) for i in range(300)])
    return discover([str(tmp_path)]).files


@pytest.mark.parametrize("unit_bytes", [1, 5_000, 20_000, 1 << 30])
def test_units_cover_the_slices_in_order_within_their_size(files, unit_bytes):
    slices = plan_slices(files, 8_000)
    units = plan_units(slices, unit_bytes)
    assert [s for u in units for s in u.slices] == [s for s, _ in slices]  # each slice once, in order
    assert [u.index for u in units] == list(range(len(units)))
    assert sum(u.weight for u in units) == sum(w for _, w in slices)
    for u in units:  # a unit exceeds its size only when one slice alone does
        assert u.weight <= unit_bytes or len(u.slices) == 1


def test_recorded_settings_change_with_what_changes_the_bytes(files):
    tok = resolve_tokenizer(None)
    units = plan_units(plan_slices(files, 1 << 20), 1 << 20)

    def settings(**kw):
        return recorded_settings(BuildConfig.of(("x",), "o", **kw), tok, units)

    base = settings(seq_len=128)
    assert base == settings(seq_len=128, workers=3, quiet=True)  # how it runs is not recorded
    assert base != settings(seq_len=256) and base != settings(seq_len=128, pack="concat")
    other = plan_units(plan_slices(files[1:], 1 << 20), 1 << 20)
    assert recorded_settings(BuildConfig.of(("x",), "o", seq_len=128), tok, other)["input_plan"] != base["input_plan"]
    assert "limit" not in base and settings(seq_len=128, limit=5)["limit"] == 5  # recorded only when set


def test_the_input_stamp_sees_an_edit_of_the_same_size(tmp_path):
    p = tmp_path / "a.jsonl"
    write_jsonl(p, ["hello world"] * 10)
    before = input_stamp(discover([str(p)]).files)
    assert input_stamp(discover([str(p)]).files) == before
    p.write_bytes(p.read_bytes().replace(b"hello", b"HELLO"))
    assert input_stamp(discover([str(p)]).files) != before


def test_limit_cuts_the_plan_at_the_nth_document(files):
    slices = plan_slices(files, 4_000)
    cut = limit_slices(slices, 450, "text")
    from packer.formats import Document, read_slice

    docs = [r for sl, _ in cut for r in read_slice(sl) if isinstance(r, Document)]
    assert len(docs) == 450
    everything = [r for sl, _ in slices for r in read_slice(sl) if isinstance(r, Document)]
    assert [d.text for d in docs] == [d.text for d in everything[:450]]
