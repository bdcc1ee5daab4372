"""packer/formats/arrow.py: Arrow IPC files, stream and file layouts, one document per row of the
--text-field column; a file without the column, not Arrow, or cut off is counted, not a traceback."""

from __future__ import annotations

import pyarrow as pa
import pytest

from packer.formats import discover, plan_slices, read_slice
from packer.formats.arrow import FORMAT
from packer.formats.base import Document, Skip

from tests.formats.helpers import arrow_stream, run, skipped


def _slice(path):
    (sl, _), = plan_slices(discover([str(path)]).files, 1 << 30)
    return sl


@pytest.mark.parametrize("layout", ["stream", "file"])
def test_both_ipc_layouts_are_read_row_by_row(tmp_path, layout):
    t = pa.table({"text": ["one", "", "two"], "id": [1, 2, 3]})
    p = tmp_path / "a.arrow"
    if layout == "stream":
        arrow_stream(p, t.to_batches(max_chunksize=2))
    else:
        with pa.OSFile(str(p), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t, max_chunksize=2)
    sl = _slice(p)
    assert list(read_slice(sl)) == [Document("one"), Skip("empty", f"{p}: row 1"), Document("two")]
    assert list(read_slice(sl, "body")) == [Skip("missing_field", f"{p}: row {i} (no column 'body')") for i in range(3)]
    assert FORMAT.fields(sl) == ["text", "id"]


def test_a_file_that_is_not_arrow_is_one_truncated_skip(tmp_path):
    p = tmp_path / "a.arrow"
    p.write_bytes(b"not arrow at all" * 5)
    recs = list(read_slice(_slice(p)))
    assert [r.reason for r in recs] == ["truncated"] and recs[0].where.startswith(f"{p}: ")


def test_arrow_stream_bad_utf8_and_cut_tail(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    bad = pa.array([b"ok", b"caf\xe9", b"fine"], pa.binary()).view(pa.string())
    batches = [pa.record_batch({"text": bad})] + [pa.record_batch({"text": [f"b{i}"] * 100}) for i in range(20)]
    arrow_stream(root / "a.arrow", batches)
    data = (root / "a.arrow").read_bytes()
    (root / "b.arrow").write_bytes(data[: len(data) * 2 // 3])
    texts, m = run(tmp_path, {})
    n_b = len(texts) - 2 - 2000
    assert texts[:2] == [b"ok", b"fine"] and 0 < n_b < 2000
    assert skipped(m) == {"invalid_utf8": 2, "truncated": 1}  # the bad row in each file, and b's cut
