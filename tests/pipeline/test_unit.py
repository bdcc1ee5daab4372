"""packer/pipeline/unit.py: the work unit is a function of its arguments alone."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from packer.formats import discover, iter_parts, plan_slices
from packer.pipeline import Job, OutputSettings, RunSettings, assemble_unit, encode_chunk, plan_units
from packer.pipeline.unit import encoder_for, holdout_split
from packer.tokenize import resolve_tokenizer
from tests.conftest import write_jsonl
from tests.io.test_object_storage import bucket, s3  # noqa: F401 - fixtures


def _unit(tmp_path, texts):
    path = tmp_path / "c.jsonl"
    write_jsonl(path, texts)
    return plan_units(plan_slices(discover([str(path)]).files, 1 << 20), 1 << 20)[0]


def _job(out, **kw):
    return Job(**{**dict(out=str(out), output=OutputSettings(seq_len=32), run=RunSettings(),
                         tokenizer=resolve_tokenizer(None), dtype="uint16"), **kw})


def _parts(unit, text_field="text"):
    return [p for sl in unit.slices for p in iter_parts(sl, text_field)]


def test_encode_chunk_depends_on_its_arguments_only(tmp_path):
    unit = _unit(tmp_path, ["alpha", "beta gamma", "", "delta " * 20])
    a = encode_chunk(_job(tmp_path / "a"), unit.index, _parts(unit))
    b = encode_chunk(_job(tmp_path / "b"), unit.index, _parts(unit))
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.lengths, b.lengths)
    assert a.lengths.tolist() == [6, 11, 121]  # bytes + EOS per document
    assert [s.reason for s in a.skipped] == ["empty"]  # an empty text is counted, not placed
    assert a.tokens[:6].tolist() == list(b"alpha") + [256]
    # another job in the same process (here: no EOS) is not confused with the first
    c = encode_chunk(_job(tmp_path / "c", tokenizer=resolve_tokenizer(None, eos=False)), unit.index, _parts(unit))
    assert c.lengths.tolist() == [5, 10, 120]


def test_assemble_unit_writes_the_same_shard_and_record_twice(tmp_path):
    unit = _unit(tmp_path, [f"document {i} " * (i % 7 + 1) for i in range(50)])
    records = []
    for name in ("a", "b"):
        job = _job(tmp_path / name)
        os.makedirs(tmp_path / name / "shards")
        os.makedirs(tmp_path / name / "units")
        records.append(assemble_unit(job, unit, [encode_chunk(job, unit.index, _parts(unit))]))
    assert records[0] == records[1]
    assert records[0]["documents"] == 50 and records[0]["rows"] * 32 == records[0]["tokens"] + records[0]["padding"]
    shard = "shards/000000.arrow"
    assert (tmp_path / "a" / shard).read_bytes() == (tmp_path / "b" / shard).read_bytes()


def test_the_encoder_cache_is_keyed_on_the_whole_tokenizer():
    a, b = resolve_tokenizer(None), resolve_tokenizer(None, eos=False)
    assert encoder_for(a) is encoder_for(a) and encoder_for(a) is not encoder_for(b)
    # an equal copy (a job's, unpickled) gets the same Encoder; the last one asked is found by identity
    copy = pickle.loads(pickle.dumps(a))
    assert copy == a and copy is not a
    assert encoder_for(copy) is encoder_for(a) is encoder_for(copy)
    assert encoder_for(b) is not encoder_for(copy)


def test_holdout_split_depends_on_the_text_alone():
    texts = [f"text {i}" for i in range(2000)]
    keep = holdout_split(texts, 0.1)
    assert holdout_split(list(reversed(texts)), 0.1) == list(reversed(keep))
    assert 100 < keep.count(False) < 300  # about a tenth held out
    assert holdout_split(["same", "same"], 0.5)[0] == holdout_split(["same", "same"], 0.5)[1]


# Issue 41.1: a chat unit with no documents (every conversation empty) wrote a record without "truncated",
# and the manifest's sum over the records raised KeyError (exit 1, a traceback), also on --resume.

def _chat_tokenizer(tmp_path):
    from tests.chat_data import LLAMA3_GEN, plain, small_tokenizer

    return small_tokenizer(str(tmp_path / "tok"), "llama3", plain(LLAMA3_GEN))


def _conversations(path, n, every=600, pad=0):
    """``n`` lines: runs of empty conversations (units of their own at --unit-mb 0.004) between real ones (the
    first 20 of each ``every``); ``pad``: bytes of another field on each empty one (fewer lines fill a unit)."""
    import json

    with open(path, "w") as f:
        for i in range(n):
            real = i % every < 20
            msgs = [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i} " * 3}]
            f.write(json.dumps({"messages": msgs} if real else {"messages": [], **({"pad": "x" * pad} if pad else {})})
                    + "\n")
    return str(path)


def test_a_chat_unit_without_documents_builds_and_resumes(tmp_path):
    import json

    from tests._cli import cli, one_line

    tok = _chat_tokenizer(tmp_path)
    lone = tmp_path / "c.jsonl"
    lone.write_text('{"messages": []}\n')
    r = cli("build", str(lone), str(tmp_path / "lone"), "--chat", "--tokenizer", tok, "--seq-len", "256", "-q")
    assert r.returncode == 2, r.stderr  # a build with nothing in it, said in one line (was: KeyError, exit 1)
    one_line(r, "no documents", "not_conversation")

    src = _conversations(tmp_path / "many.jsonl", 1800)
    args = ["--chat", "--tokenizer", tok, "--seq-len", "256", "--unit-mb", "0.004", "--workers", "1", "-q"]
    r = cli("build", src, str(tmp_path / "clean"), *args)
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "clean" / "manifest.json").read_text())
    assert any(s["rows"] == 0 for s in m["shards"]) and m["totals"]["truncated"] == 0
    assert m["totals"]["documents"] == 60 and m["totals"]["skipped"] == {"not_conversation": 1740}
    units = [json.loads(p.read_text()) for p in sorted((tmp_path / "clean" / "units").iterdir())]
    assert all(u["truncated"] == 0 for u in units)  # in every chat unit's record, rows or none

    out = str(tmp_path / "killed")
    r = cli("build", src, out, *args, env={"PACKER_FAULT": "manifest"})  # killed with every unit written
    assert r.returncode != 0 and not os.path.exists(os.path.join(out, "manifest.json"))
    r = cli("build", src, out, *args, "--resume")
    assert r.returncode == 0, r.stderr
    assert open(os.path.join(out, "manifest.json"), "rb").read() == (tmp_path / "clean" / "manifest.json").read_bytes()


def test_a_chat_unit_without_documents_on_an_object_store(tmp_path, bucket):
    """The same on moto's S3 (the records there carry row layouts; an empty unit has none)."""
    import json

    from packer import build
    from tests._services import objects, s3_client

    tok = _chat_tokenizer(tmp_path)
    # Empty conversations of 250 bytes, 50 between runs of real ones: two or three units of nothing each. (Each
    # skipped record on a store is named by reading the object from its start, packer/formats/jsonl.py where:
    # 1,740 skips of 17 bytes took 3 minutes of a busy machine.)
    src = _conversations(tmp_path / "many.jsonl", 210, every=70, pad=230)
    s3_client().upload_file(src, bucket, "in/many.jsonl")
    out = f"s3://{bucket}/o"
    m = build([f"s3://{bucket}/in"], out, seq_len=256, tokenizer=tok, chat=True, unit_mb=0.004, workers=1).manifest
    assert any(s["rows"] == 0 for s in m["shards"]) and m["totals"]["truncated"] == 0
    units = {k: json.loads(v) for k, v in objects(bucket, "o").items() if k.startswith("units/")}
    assert units and all(u["truncated"] == 0 for u in units.values())
def test_a_job_holds_the_settings_and_pickles_whole(tmp_path):
    """Sent to pool workers and Ray tasks by pickle: the settings come back whole, new fields included."""
    import pickle

    out = OutputSettings(seq_len=32, holdout=0.25, limit=7)
    job = _job(tmp_path, output=out, run=RunSettings(strict=True))
    back = pickle.loads(pickle.dumps(job))
    assert back == job and back.output == out and back.output.limit == 7
    assert (back.seq_len, back.pack, back.text_field, back.holdout, back.strict) == (32, "bfd", "text", 0.25, True)


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants, summed (the build's workers are its children)."""
    import glob

    todo, total = [pid], 0
    while todo:
        p = todo.pop()
        for t in glob.glob(f"/proc/{p}/task/*/children"):
            try:
                todo += [int(c) for c in open(t).read().split()]
            except OSError:
                pass
        try:
            total += int([x.split()[1] for x in open(f"/proc/{p}/status") if x.startswith("VmRSS:")][0]) << 10
        except (OSError, IndexError):
            pass
    return total


def _build_peak(src, out) -> int:
    """Peak resident bytes of ``packer build SRC OUT`` (a child, 2 workers), its process tree sampled every 5 ms."""
    import subprocess
    import sys
    import threading

    import packer

    here = os.path.dirname(os.path.dirname(packer.__file__))  # the child runs the packer these tests import
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here] + [x for x in [os.environ.get("PYTHONPATH")] if x])}
    p = subprocess.Popen([sys.executable, "-m", "packer", "build", str(src), str(out), "--seq-len", "2048", "-q",
                          "--workers", "2"], env=env, cwd=os.path.dirname(src))
    peak, done = [0], threading.Event()

    def sample():
        while not done.wait(0.005):
            peak[0] = max(peak[0], _tree_rss(p.pid))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    assert p.wait(timeout=600) == 0
    done.set()
    t.join()
    return peak[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc")
def test_one_huge_line_costs_at_most_four_times_its_size(tmp_path):
    """One 64 MB jsonl line, byte tokenizer (2 bytes of ids per byte of text): the build's process tree
    peaks at most 4x the line above the same build of a one-line file. Before issue 53.3 it was 7.6x
    (the line, orjson's copy, the str, its UTF-8, the ids as uint32 and a mask; then the shard twice)."""
    line = b'{"text": "' + b"a few words of text, then a newline\\n" * (64_000_000 // 37) + b'"}\n'
    (tmp_path / "big.jsonl").write_bytes(line)
    (tmp_path / "tiny.jsonl").write_bytes(b'{"text": "a few words"}\n')
    base = _build_peak(tmp_path / "tiny.jsonl", tmp_path / "o1")
    big = _build_peak(tmp_path / "big.jsonl", tmp_path / "o2")
    assert big - base <= 4 * len(line), f"peak {(big - base) / len(line):.2f}x the line above a tiny build"
    assert json.loads((tmp_path / "o2" / "manifest.json").read_text())["totals"]["tokens"] > 60_000_000
