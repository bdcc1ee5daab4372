"""``packer show``: a row decoded back to exactly the tokens the model sees, boundaries marked."""

from __future__ import annotations

import json
import os
import random
import re

import numpy as np
import pytest
from click.testing import CliRunner

from packer import BuildConfig, build
from packer import shards as S
from packer.io import atomic_write, write_json
from packer.cli import main

from tests.conftest import invoke as run
from packer.inspect.show import BYTES_EOS_TEXT, Decoder, read_row

MARKER = re.compile(r"^\[doc (\d+):(\d+) piece (\d+)/(\d+), offset ([\d,]+), ([\d,]+) tokens(?:; other pieces in rows (.*))?\]$")
PADDING = re.compile(r"^\[padding: (?:([\d,]+) slots of pad id (\d+)|none, the row is full)\]$")




@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """ASCII one-line documents, some longer than a row, built with seq_len 32 in several units."""
    rng = random.Random(3)
    words = "ab cd efg hij klmn opq rs tuvw xyz".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.choice([1, 2, 4, 9, 20]))) for _ in range(300)]
    root = tmp_path_factory.mktemp("tiny")
    for k in range(2):
        with open(root / f"{k}.jsonl", "w") as f:
            for t in texts[k * 150 : (k + 1) * 150]:
                f.write(json.dumps({"text": t}) + "\n")
    out = str(root / "out")
    build(BuildConfig.of(inputs=(str(root),), out=out, seq_len=32, workers=1, unit_bytes=4096))
    with open(os.path.join(out, S.MANIFEST)) as f:
        m = json.load(f)
    assert len(m["shards"]) >= 2 and m["totals"]["documents_split"] > 0  # the test needs both
    return out, texts, m


def parse(stdout: str):
    """Pieces (unit, doc, k, n, offset, length, other_rows, text) and the padding count from show's output."""
    pieces, padding, cur = [], None, None
    for line in stdout.splitlines()[1:]:
        mk = MARKER.match(line)
        pd = PADDING.match(line)
        if mk:
            u, d, k, n, off, ln, others = mk.groups()
            cur = [int(u), int(d), int(k), int(n), int(off.replace(",", "")), int(ln.replace(",", "")), others, ""]
            pieces.append(cur)
        elif pd:
            padding = int(pd.group(1).replace(",", "")) if pd.group(1) else 0
        elif cur is not None:
            cur[7] += line
    return pieces, padding


def test_every_row_reassembles_every_document(tiny):
    """Show every row; pieces joined in offset order give each document's text and EOS, exactly once."""
    out, texts, m = tiny
    seq_len = m["seq_len"]
    docs: dict[tuple[int, int], list] = {}
    for row in range(m["totals"]["rows"]):
        res = run("show", out, str(row))
        assert res.exit_code == 0, res.output
        pieces, padding = parse(res.stdout)
        assert pieces and padding is not None
        assert sum(p[5] for p in pieces) + padding == seq_len
        for u, d, k, n, off, ln, others, text in pieces:
            assert len(text) - text.count(BYTES_EOS_TEXT) * (len(BYTES_EOS_TEXT) - 1) == ln  # one byte per token
            docs.setdefault((u, d), []).append((off, k, n, text, row, others))
    assert len(docs) == m["totals"]["documents"]
    units = sorted({u for u, _ in docs})
    got = []
    for u in units:
        for d in range(sum(1 for uu, _ in docs if uu == u)):
            parts = sorted(docs[(u, d)])
            n = parts[0][2]
            assert [p[1] for p in parts] == list(range(1, n + 1)) and all(p[2] == n for p in parts)
            rows = [p[4] for p in parts]
            for off, k, n_, text, row, others in parts:  # "other pieces in rows" lists exactly the others
                listed = set()
                for run_ in (others or "").split(", "):
                    if run_:
                        a, _, b = run_.partition("-")
                        listed.update(range(int(a), int(b or a) + 1))
                assert listed == set(rows) - {row}
            got.append("".join(p[3] for p in parts))
    assert got == [t + BYTES_EOS_TEXT for t in texts]


def test_read_row_tokens_are_the_shard_row(tiny):
    out, _, m = tiny
    import pyarrow as pa

    first = 0
    for e in m["shards"]:
        t = pa.ipc.open_file(pa.memory_map(os.path.join(out, e["path"]))).read_all()
        for local in (0, e["rows"] - 1):
            view = read_row(out, first + local)
            ids = np.asarray(t.column("input_ids")[local].values)
            shown = np.concatenate([p.ids for p in view.pieces] + [view.pad_ids])
            assert np.array_equal(shown, ids)
            assert view.path == e["path"] and view.local_row == local
            assert [len(p.ids) for p in view.pieces] == t.column("doc_lens")[local].as_py()
        first += e["rows"]


def test_ids_mode(tiny):
    out, _, m = tiny
    res = run("show", out, "0", "--ids")
    assert res.exit_code == 0
    view = read_row(out, 0)
    lines = res.stdout.splitlines()
    for p in view.pieces:
        assert " ".join(map(str, p.ids.tolist())) in lines


def test_row_out_of_range(tiny):
    out, _, m = tiny
    res = run("show", out, str(m["totals"]["rows"]))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and f"holds {m['totals']['rows']} rows" in res.stderr


def test_gpt2_row_decodes_with_the_real_tokenizer(sample_build_gpt2, gpt2_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(gpt2_path)
    out = sample_build_gpt2
    res = run("show", out, "3")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.stdout and "note" not in res.stdout
    view = read_row(out, 3)
    for p in view.pieces:
        assert tok.decode(p.ids.tolist(), skip_special_tokens=False).rstrip("\n") in res.stdout
    ends = [p for p in view.pieces if p.k == p.of]
    assert res.stdout.count("<|endoftext|>") >= len(ends)  # every document end shows its EOS


def test_unloadable_tokenizer_shows_ids_and_says_why(sample_build_gpt2, copy_build):
    out = copy_build(sample_build_gpt2)
    path = os.path.join(out, S.MANIFEST)
    with open(path) as f:
        m = json.load(f)
    m["tokenizer"]["name"] = "/nowhere/tokenizer.json"
    write_json(path, m)
    res = run("show", out, "0")
    assert res.exit_code == 0
    notes = [ln for ln in res.stdout.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "/nowhere/tokenizer.json" in notes[0]
    view = read_row(out, 0)
    assert " ".join(map(str, view.pieces[0].ids.tolist())) in res.stdout


def test_other_tokenizer_warns(sample_build, gpt2_path):
    res = run("show", sample_build, "0", "--tokenizer", gpt2_path)
    assert res.exit_code == 0 and "warning:" in res.stdout and "fingerprint" in res.stdout


def test_bytes_decoder_marks_eos_and_keeps_broken_utf8_visible():
    d = Decoder({"tokenizer": {"name": "bytes", "kind": "bytes", "fingerprint": None}})
    ids = np.array(list("café".encode()) + [256] + [0xE6], dtype=np.uint16)
    assert d.decode(ids) == "café" + BYTES_EOS_TEXT + "\\xe6"


def test_out_of_range_doc_lens_are_one_line(sample_build, copy_build):
    """A doc_lens entry past seq_len (or offsets out of order): packer show says so in one line, exit 1
    (a traceback on 0a283c5)."""
    import pyarrow as pa

    from tests.conftest import invoke
    from tests.train.test_dataset import _buffer_offset, _patch, _shard

    out = copy_build(sample_build)
    p = _shard(out, 0)
    _patch(p, _buffer_offset(p, "doc_lens"), (5000).to_bytes(4, "little"))
    res = invoke("show", out, "0")
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    assert "000000.arrow: a doc_lens entry is outside 1..256: shard is corrupt" in res.stderr
    src = pa.memory_map(p)
    base = src.read_buffer(1).address
    src.seek(0)
    offsets = pa.ipc.open_file(src).get_batch(0).column("doc_lens").offsets
    del src
    _patch(p, offsets.buffers()[1].address - base + 4, (10**6).to_bytes(4, "little"))  # row 0 ends past the values
    res = invoke("show", out, "0")
    assert res.exit_code == 1 and "doc_lens offsets are out of order" in res.stderr, res.stderr
