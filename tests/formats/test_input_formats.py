"""The formats added after the first three: compressed text, .json, .ndjson, bz2/xz, HF save_to_disk folders and
hub snapshots. Each gets the awkward-record matrix of tests/formats/test_awkward_inputs.py (bad UTF-8, a broken tail,
empty text, a missing field), and every record written is accounted for: a document, or a skip by reason."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packer import BuildConfig, build
from packer.errors import PackerError

from tests.formats.helpers import COMPRESS, accounted, arrow_stream, jl, run, skipped


# The matrix every record-per-line format gets: 2 documents, and one record for each reason.
MATRIX = jl({"text": "first"}, b'{"text": "caf\xe9"}', {"text": ""}, {"other": "x"}, {"text": 7}, b"{broken", {"text": "last"})
MATRIX_SKIPS = {"invalid_utf8": 1, "empty": 1, "missing_field": 1, "not_string": 1, "malformed_json": 1}


@pytest.fixture
def quiet_datasets(monkeypatch):
    """``datasets`` with no progress bars: a bar would leave tqdm's monitor thread running in this
    process, and later builds here would then start their workers from a forkserver (see
    packer.pipeline.engines.local.make_pool) that keeps a stale environment (the S3 tests set theirs later)."""
    datasets = pytest.importorskip("datasets")
    import tqdm

    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)
    datasets.disable_progress_bars()
    yield datasets
    datasets.enable_progress_bars()


@pytest.mark.parametrize("name", ["a.ndjson", "a.json"])
def test_line_formats_matrix(tmp_path, name):
    texts, m = run(tmp_path, {name: MATRIX})
    assert texts == [b"first", b"last"]
    assert skipped(m) == MATRIX_SKIPS
    assert m["totals"]["skipped_examples"]["invalid_utf8"] == [str(tmp_path / "in" / name) + ":2"]
    accounted(m, 7)


@pytest.mark.parametrize("ext", [".bz2", ".xz", ".gz", ".zst"])
@pytest.mark.parametrize("base", [".jsonl", ".ndjson", ".json"])
def test_compressed_line_formats_matrix_and_cut_tail(tmp_path, base, ext):
    whole = COMPRESS[ext](MATRIX)
    # A second file cut short: the records before the cut are kept, the cut counts once.
    long = jl(*({"text": f"doc {i}"} for i in range(4000)))
    cut = COMPRESS[ext](long)
    cut = cut[: len(cut) * 3 // 4]
    texts, m = run(tmp_path, {"a" + base + ext: whole, "b" + base + ext: cut})
    assert texts[:2] == [b"first", b"last"]
    kept = texts[2:]
    assert kept == [f"doc {i}".encode() for i in range(len(kept))], "a prefix of the cut file, in order"
    assert skipped(m) == {**MATRIX_SKIPS, "truncated": 1}


def test_hf_save_to_disk_folder(tmp_path, quiet_datasets):
    datasets = quiet_datasets
    root = tmp_path / "in"
    ds = datasets.Dataset.from_dict({"text": ["one", "", None, "two"], "id": [1, 2, 3, 4]})
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(root / "dd"))
    datasets.Dataset.from_dict({"content": ["x", "y"]}).save_to_disk(str(root / "other"))
    out = str(tmp_path / "out")
    res = build([str(root)], out, seq_len=64, workers=1)
    from tests.conftest import read_documents

    docs, m = read_documents(out)
    texts = [bytes(d[:-1].astype("uint8").tolist()) for d in docs]
    assert texts == [b"one", b"one", b"two"]  # dd/test, then dd/train (sorted), other has no text column
    assert skipped(m) == {"empty": 1, "not_string": 1, "missing_field": 2}
    accounted(m, 1 + 4 + 2)
    assert m["totals"]["input_files"] == 3
    notes = " ".join(res.notes)
    assert "save_to_disk metadata" in notes and "dataset_info.json" in notes


def test_parquet_invalid_utf8_row_is_skipped(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    col = pa.array([b"good", b"\xff\xfe", b"also"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": col}), root / "a.parquet")
    texts, m = run(tmp_path, {})
    assert texts == [b"good", b"also"] and skipped(m) == {"invalid_utf8": 1}
    assert m["totals"]["skipped_examples"]["invalid_utf8"][0].endswith("a.parquet: row 1")


def test_hf_hub_snapshot_layout(tmp_path):
    """As in ~/.cache/huggingface/hub: snapshot files are symlinks into blobs/; README.md is the card, not a document."""
    repo = tmp_path / "in" / "datasets--me--corpus"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    (snap / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": ["alpha", "beta"]}), repo / "blobs" / "b1")
    pq.write_table(pa.table({"text": ["gamma"]}), repo / "blobs" / "b2")
    (repo / "blobs" / "b3").write_text("---\nconfigs:\n- config_name: default\n---\n# A card\n")
    os.symlink("../../../blobs/b1", snap / "data" / "train-00000-of-00002.parquet")
    os.symlink("../../../blobs/b2", snap / "data" / "train-00001-of-00002.parquet")
    os.symlink("../../blobs/b3", snap / "README.md")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    texts, m = run(tmp_path, {}, inputs=(str(snap),))
    assert texts == [b"alpha", b"beta", b"gamma"]
    assert m["totals"]["input_files"] == 2 and m["totals"]["ignored_files"] == 1
    # The whole cached repo: blobs/ and refs/ are named as cache internals, the data read once through snapshots/.
    from packer.formats import discover

    found = discover([str(repo)])
    assert [os.path.basename(f.path) for f in found.files] == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]
    lines = " ".join(found.ignored_lines())
    assert "HF hub cache internals" in lines and "dataset card" in lines


def test_folder_with_only_unsupported_files_says_what_it_found(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    for name in ("a.csv", "b.csv", "c.pdf"):
        (root / name).write_text("x")
    with pytest.raises(PackerError) as e:
        build([str(root)], str(tmp_path / "out"))
    msg = str(e.value)
    assert "no input files found" in msg and ".csv x2" in msg and ".pdf" in msg
    assert "json (.json)" in msg and "arrow (.arrow)" in msg and "\n" not in msg


# --- A build that skipped everything fails, naming the fields the records have. ---------------------------


def _fails(tmp_path, files, **kw) -> str:
    with pytest.raises(PackerError) as e:
        run(tmp_path, files, **kw)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert not os.path.exists(tmp_path / "out" / "manifest.json"), "no manifest for a build with no document"
    return str(e.value)


def test_all_skipped_chat_records_name_their_fields(tmp_path):
    chat = jl(*({"messages": [{"role": "user", "content": "hi"}], "id": i} for i in range(5)))
    msg = _fails(tmp_path, {"c.jsonl": chat}, text_field="messages")
    assert "not_string 5" in msg and "messages" in msg and "id" in msg


def test_all_skipped_parquet_names_its_columns(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    pq.write_table(pa.table({"content": ["a", "b"], "url": ["u", "v"]}), root / "p.parquet")
    msg = _fails(tmp_path, {})
    assert "missing_field 2" in msg and "content, url" in msg


def test_empty_text_field_is_refused(tmp_path):
    with pytest.raises(PackerError, match="--text-field must name a field"):
        BuildConfig.of(["in"], "out", text_field="")


def test_mostly_skipped_warns(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.jsonl").write_bytes(jl({"text": "ok"}, *({"txt": "no"} for _ in range(3))))
    res = build([str(root)], str(tmp_path / "out"), seq_len=64, workers=1)
    assert res.warnings and "75%" in res.warnings[0] and "missing_field 3" in res.warnings[0]
    res = build([str(root / "a.jsonl")], str(tmp_path / "out2"), seq_len=64, workers=1, text_field="txt")
    assert res.warnings == []  # 3 of 4 were used


def test_max_record_applies_to_json_arrays_and_arrow_batches(tmp_path):
    """--max-record-mb skips and counts an over-long record in a .json array and an .arrow file too,
    as in .jsonl and parquet; the records around it are kept."""
    root = tmp_path / "in"
    root.mkdir()
    big = "x" * 5000
    (root / "a.json").write_bytes(json.dumps([{"text": "one"}, {"text": big}, {"text": "two"}], indent=1).encode())
    arrow_stream(root / "b.arrow", [pa.record_batch({"text": ["three", big, "four"]})])
    texts, m = run(tmp_path, {}, max_record_mb=0.002)  # 2,097 bytes
    assert sorted(texts) == [b"four", b"one", b"three", b"two"]
    assert skipped(m) == {"too_long": 2}
    ex = sorted(m["totals"]["skipped_examples"]["too_long"])
    assert ex[0].startswith(str(root / "a.json") + ":5") and ex[1].startswith(str(root / "b.arrow") + ": row 1")
    texts, m = run(tmp_path, {}, overwrite=True)  # the default limit keeps them
    assert len(texts) == 6 and "too_long" not in skipped(m)


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_columnar_file_changed_after_discovery_is_counted_truncated(tmp_path, kind):
    """A parquet or arrow file rewritten between discovery and the end of its read ends its slice
    with a counted ``truncated`` (its records may mix two versions), as jsonl and text files do."""
    from packer.formats import discover, plan_slices, read_slice

    root = tmp_path / "in"
    root.mkdir()
    p = root / f"a.{kind}"
    table = pa.table({"text": ["one", "two"]})
    if kind == "parquet":
        pq.write_table(table, p)
    else:
        arrow_stream(p, table.to_batches())
    (sl, _), = plan_slices(discover([str(root)]).files, 1 << 30)
    assert [r.text for r in read_slice(sl)] == ["one", "two"]  # as discovered: nothing counted
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # rewritten in place: a new mtime
    recs = list(read_slice(sl))
    assert [r.text for r in recs[:2]] == ["one", "two"]
    assert recs[2].reason == "truncated" and "changed while it was read" in recs[2].where
