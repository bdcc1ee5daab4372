"""packer/pipeline/report.py: what a build says at its end (it never changes the bytes)."""

from __future__ import annotations

import pytest

from packer.pipeline.report import no_documents_error, plural, skipped_warning


def test_plural():
    assert plural(1, "unit") == "1 unit" and plural(2, "unit") == "2 units" and plural(1024, "unit") == "1,024 units"
    assert plural(3, "entry", "entries") == "3 entries"


def test_mostly_skipped_warns_and_names_the_reasons_by_count():
    assert skipped_warning({"documents": 10, "skipped": {"too_long": 9}}) is None  # under half
    w = skipped_warning({"documents": 2, "skipped": {"missing_field": 5, "not_string": 3}})
    assert w.startswith("80% of records were skipped (8 records: missing_field 5, not_string 3)")
    assert "--text-field" in w
    chat = skipped_warning({"documents": 1, "trained_tokens": 5, "skipped": {"template_mismatch": 4}})
    assert "--messages-field" in chat and "--text-field" not in chat  # a chat build names chat causes
    # held-out documents count as built
    assert skipped_warning({"documents": 0, "holdout_documents": 10, "skipped": {"too_long": 9}}) is None


def test_no_documents_names_what_was_skipped_and_an_example():
    e = no_documents_error({"skipped": {"bad_json": 3}, "skipped_examples": {"bad_json": ["a.jsonl:2"]}}, [], "text")
    assert str(e).startswith("no documents: all 3 records were skipped (bad_json 3)")
    assert "e.g. a.jsonl:2" in str(e) and str(e).endswith("nothing was built")
    assert "empty files" in str(no_documents_error({"skipped": {}}, [], "text"))


def test_no_fast_engine_note_only_where_tiktoken_encodes_for_want_of_fastokens(monkeypatch):
    import importlib.util

    from packer.pipeline import report

    real = importlib.util.find_spec
    monkeypatch.delenv("PACKER_FASTOKENS", raising=False)
    monkeypatch.setattr(report.importlib.util, "find_spec", lambda name: None if name == "fastokens" else real(name))
    (note,) = report.no_fast_engine_note("tiktoken", "auto")
    assert "fastokens" in note and "tiktoken encodes" in note and "packer[fast]" in note
    assert report.no_fast_engine_note("fastokens", "auto") == []
    assert report.no_fast_engine_note("hf", "auto") == []  # HF encodes for its own reason, said elsewhere
    assert report.no_fast_engine_note("tiktoken", "tiktoken") == []  # asked for
    monkeypatch.setenv("PACKER_FASTOKENS", "off")
    assert report.no_fast_engine_note("tiktoken", "auto") == []
    monkeypatch.delenv("PACKER_FASTOKENS")
    monkeypatch.setattr(report.importlib.util, "find_spec", real)
    if real("fastokens") is not None:
        assert report.no_fast_engine_note("tiktoken", "auto") == []  # installed: a small input's tiktoken says nothing


def test_a_build_without_fastokens_says_so_once(tmp_path, monkeypatch, gpt2_path):
    import importlib.util

    from packer import build
    from packer.pipeline import report
    from tests.conftest import write_jsonl

    real = importlib.util.find_spec
    monkeypatch.delenv("PACKER_FASTOKENS", raising=False)
    monkeypatch.setattr(report.importlib.util, "find_spec", lambda name: None if name == "fastokens" else real(name))
    src = write_jsonl(tmp_path / "a.jsonl", ["hello world, a plain text"] * 20)
    r = build(src, str(tmp_path / "out"), seq_len=64, tokenizer=gpt2_path, workers=1)
    if r.manifest["tokenizer"]["backend"] != "tiktoken":
        pytest.skip(f"tiktoken does not encode here ({r.manifest['tokenizer']['backend_reason']})")
    assert sum("fastokens" in n and "not installed" in n for n in r.notes) == 1


def test_dry_run_plan_lines_are_aligned_in_columns():
    """Issue 55.8: the --dry-run tables line up: each column starts (bytes: ends) at one place in every row."""
    from packer.pipeline import plan_lines

    files = [{"path": "corpus/a.jsonl", "format": "jsonl", "compression": None, "bytes": 2_091_581},
             {"path": "corpus/longer/name.jsonl.gz", "format": "jsonl", "compression": "gzip", "bytes": 217_776},
             {"path": "b.txt", "format": "text", "compression": None, "bytes": 7}]
    plan = {"out": "out", "out_state": "would be created", "files": files, "input_bytes": 2_309_364,
            "formats": {"jsonl": {"files": 1, "bytes": 2_091_581}, "jsonl (gzip)": {"files": 1, "bytes": 217_776},
                        "text": {"files": 12, "bytes": 7}},
            "ignored": [], "units": [{"slices": 3}], "settings": {}}
    lines = plan_lines(plan)
    groups, rows = lines[2:5], lines[5:8]
    for table in (groups, rows):
        assert len({len(line) for line in table}) == 1, table  # bytes right-aligned: every row ends in one place
    for line, f in zip(rows, files):
        assert line.rindex("  " + f["format"]) == rows[0].rindex("  jsonl"), rows  # the format column starts in one place
    assert len({line.index(" file") for line in groups}) == 1, groups  # the counts right-aligned, "file(s)" after
