"""The commands over finished builds (packer/cli_reuse.py): --help that teaches, and a wrong call in one line."""

from __future__ import annotations

from .conftest import invoke


def test_repack_help_teaches_lengths_buckets_and_token_stores():
    out = invoke("repack", "--help").output
    for words in ("--seq-len", "--buckets", "byte for byte", "Megatron", "--vocab-size", "from packer import repack"):
        assert words in out, words


def test_export_help_names_every_format():
    out = invoke("export", "--help").output
    for fmt in ("megatron", "olmo", "nanogpt", "mds"):
        assert fmt in out


def test_a_repack_without_a_length_or_buckets_is_one_line(sample_build, tmp_path):
    res = invoke("repack", sample_build, str(tmp_path / "o"))
    assert res.exit_code == 2 and "--seq-len" in res.output and res.output.count("\n") == 1, res.output


def test_an_export_into_an_existing_file_is_one_line(sample_build, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    res = invoke("export", sample_build, str(taken), "--format", "nanogpt")
    assert res.exit_code == 2 and res.output.count("\n") == 1 and taken.read_text() == "mine", res.output
