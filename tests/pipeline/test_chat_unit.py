"""The chat half of a work unit (packer/pipeline/chat_unit.py): what is the build's, not tokenize's.
The conversations' ids and masks: tests/tokenize/chat/test_encode.py."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from packer import build
from tests.chat_data import QWEN3, small_tokenizer, tool_conversations

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def small_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("small_tok")
    return {"qwen3": small_tokenizer(str(root / "qwen3"), "qwen3", QWEN3)}


def _write(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return str(path)


def test_a_resumed_build_renders_with_the_recorded_date(small_folders, tmp_path):
    """Issue 33.6: strftime_now is fixed at the build's start, recorded, and reused by --resume."""
    tpl = tmp_path / "date.jinja"
    tpl.write_text("{{ 'Today: ' + strftime_now('%Y-%m-%d') + '\\n' }}" + QWEN3)
    ins = []
    for k in range(2):
        ins.append(_write(tmp_path / f"c{k}.jsonl", tool_conversations(30, seed=k)))
    out = str(tmp_path / "o")
    kw = dict(seq_len=4096, tokenizer=small_folders["qwen3"], chat=True, chat_template=str(tpl), workers=1,
              unit_mb=0.004)
    build(ins, out, **kw)
    bj = json.load(open(os.path.join(out, "build.json")))
    assert bj["settings"]["chat"]["date"]
    bj["settings"]["chat"]["date"] = "2020-01-02T00:00:00+00:00"  # as if the killed build had started then
    with open(os.path.join(out, "build.json"), "w") as f:
        json.dump(bj, f)
    m = json.load(open(os.path.join(out, "manifest.json")))
    os.remove(os.path.join(out, "manifest.json"))
    last = m["shards"][-1]
    os.remove(os.path.join(out, last["path"]))
    m = build(ins, out, resume=True, **kw).manifest
    assert m["settings"]["chat"]["date"] == "2020-01-02T00:00:00+00:00"
    tk = transformers.AutoTokenizer.from_pretrained(small_folders["qwen3"])
    t = pa.ipc.open_file(os.path.join(out, m["shards"][-1]["path"])).read_all()
    assert "Today: 2020-01-02" in tk.decode(t.column("input_ids")[0].as_py())
