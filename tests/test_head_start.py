"""The command's head start (packer/head_start.py): the JSON the last fastokens build loaded is loaded
again before packer is imported, taken only when it is the very JSON this build runs, and the shards
are the same bytes with or without it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from packer import head_start as H

from tests.conftest import REPO, copy_family, write_jsonl

# A child that logs every fastokens load (its thread's name) as it happens, then runs the command through one of
# its entry points: "entry" (packer._entry, the `packer` script), "module" (python -m packer.cli) or "main" (begin, then
# click's main in this process, which also lists the packer threads left at the end).
CHILD = r"""
import os, runpy, sys, threading, fastokens
real = fastokens.Tokenizer.from_json_str
def logged(s):
    print("LOAD " + threading.current_thread().name, flush=True)
    return real(s)
fastokens.Tokenizer.from_json_str = staticmethod(logged)
entry = os.environ["HEAD_START_ENTRY"]
if entry == "entry":
    from packer._entry import main
    sys.argv = ["packer"] + sys.argv[1:]
    main()
elif entry == "module":
    sys.argv = ["packer"] + sys.argv[1:]
    runpy.run_module("packer.cli", run_name="__main__", alter_sys=True)
else:
    from packer.head_start import begin
    begin(sys.argv[1:])
    from packer.cli import main
    try:
        main.main(args=sys.argv[1:], standalone_mode=False)
    finally:
        print("THREADS " + ",".join(t.name for t in threading.enumerate() if t.name.startswith("packer-")))
"""


def test_only_a_build_that_may_run_fastokens_begins():
    tok = H._build_tokenizer
    assert tok(["build", "in/", "out/", "--tokenizer", "t.json"]) == "t.json"
    assert tok(["build", "in/", "out/", "--tokenizer=t.json", "--tokenizer-backend", "auto"]) == "t.json"
    assert tok(["build", "in/", "out/"]) is None  # the byte tokenizer
    for other in (["--tokenizer-backend", "hf"], ["--tokenizer-backend=tiktoken"], ["--chat"], ["--dry-run"], ["-h"]):
        assert tok(["build", "in/", "out/", "--tokenizer", "t.json", *other]) is None, other
    assert tok(["stats", "out/", "--tokenizer", "t.json"]) is None and tok([]) is None


def test_no_record_no_head_start_and_a_damaged_one_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path))
    H.begin(["build", "in/", "out/", "--tokenizer", str(tmp_path / "t.json")])
    assert H.take() is None
    H.loaded('{"model": 1}')
    H.remember(str(tmp_path / "t.json"))
    rec, text = H._paths(str(tmp_path / "t.json"))
    assert json.load(open(rec)) == {"chars": 12} and open(text).read() == '{"model": 1}'
    open(text, "w").write('{"model": 12}')  # not the length recorded: a torn or edited record
    H.begin(["build", "in/", "out/", "--tokenizer", str(tmp_path / "t.json")])
    assert H.take() is None
    open(text, "w").write('{"model": 1}' + " " * 100)  # far larger than recorded: not even read
    H.begin(["build", "in/", "out/", "--tokenizer", str(tmp_path / "t.json")])
    assert H.take() is None
    open(text, "w").write('{"model": 1}')
    open(rec, "w").write(json.dumps({"chars": 12, "pad": "x" * 5000}))  # not a record's size
    H.begin(["build", "in/", "out/", "--tokenizer", str(tmp_path / "t.json")])
    assert H.take() is None
    monkeypatch.setenv("PACKER_CACHE", "off")
    H.loaded("x")
    H.remember(str(tmp_path / "t.json"))  # records off: nothing written, no error
    assert H._paths("t.json") is None


def test_a_record_fastokens_refuses_is_kept_as_its_error(tmp_path, monkeypatch, capfd):
    pytest.importorskip("fastokens")
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path))
    H.loaded('{"model": 1}')
    H.remember("t.json")
    H.begin(["build", "in/", "out/", "--tokenizer", "t.json"])
    text, thread, box = H.take()
    thread.join()
    assert text == '{"model": 1}' and isinstance(box[0], ValueError)
    assert capfd.readouterr().err == ""  # no thread's traceback


def _command(args, cache, entry="main") -> tuple[list[str], subprocess.CompletedProcess]:
    env = {**os.environ, "PACKER_CACHE": cache, "PYTHONPATH": REPO, "HEAD_START_ENTRY": entry}
    r = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return [x[5:] for x in r.stdout.splitlines() if x.startswith("LOAD ")], r


def test_the_next_build_takes_the_head_start_and_writes_the_same_bytes(tmp_path, monkeypatch, small_family):
    pytest.importorskip("fastokens")
    pytest.importorskip("tiktoken")
    tok = os.path.join(copy_family(small_family, "gpt2-like", tmp_path / "fam"), "tokenizer.json")
    src = tmp_path / "in.jsonl"
    texts = [f"document {i}: " + "the quick brown fox jumps over the lazy dog. " * (1 + i % 40) for i in range(600)]
    write_jsonl(str(src), texts)
    assert os.path.getsize(src) > 3 * os.path.getsize(tok)  # fastokens pays (fastokens_backend.worth_it)
    cache = str(tmp_path / "cache")

    def build(name, entry="main"):
        out = tmp_path / name
        loads, _ = _command(["build", str(src), str(out), "--tokenizer", tok, "--seq-len", "256", "--workers", "2",
                             "-q"], cache, entry)
        m = json.load(open(out / "manifest.json"))
        assert m["tokenizer"]["backend"] == "fastokens"
        return loads, m, {p.name: p.read_bytes() for p in (out / "shards").iterdir()}

    loads, m, first = build("first")
    assert loads == ["packer-fastokens-load"]  # no record yet: loaded beside the checks, and recorded
    with monkeypatch.context() as mp:
        mp.setenv("PACKER_CACHE", cache)
        rec, text = H._paths(tok)
    assert hashlib.sha256(open(text, "rb").read()).hexdigest() == m["tokenizer"]["fingerprint"]
    loads, _, second = build("second")
    assert loads == ["packer-head-start"] and second == first  # one load, begun before packer's imports
    with open(text, "a") as f:  # a record of another JSON (the tokenizer edited since): loaded, not taken
        f.write(" ")
    json.dump({"chars": len(open(text, encoding="utf-8", newline="").read())}, open(rec, "w"))
    loads, _, third = build("third")
    assert loads == ["packer-head-start", "packer-fastokens-load"] and third == first
    loads, _, fourth = build("fourth")  # the third build recorded its own JSON again
    assert loads == ["packer-head-start"] and fourth == first
    for entry in ("entry", "module"):  # the `packer` script and python -m packer.cli begin it themselves
        loads, _, got = build(entry, entry)
        assert loads == ["packer-head-start"] and got == first, entry
    # A build too small for fastokens (tiktoken runs it): the head start is joined and dropped, not taken.
    small = tmp_path / "small.jsonl"
    write_jsonl(str(small), texts[:20])
    outs = {}
    for backend in ("auto", "tiktoken"):
        out = tmp_path / f"small-{backend}"
        loads, r = _command(["build", str(small), str(out), "--tokenizer", tok, "--seq-len", "256", "-q",
                             "--tokenizer-backend", backend], cache)
        assert json.load(open(out / "manifest.json"))["tokenizer"]["backend"] == "tiktoken"
        assert loads == (["packer-head-start"] if backend == "auto" else [])
        assert "THREADS \n" in r.stdout + "\n"  # no packer thread left
        outs[backend] = {p.name: p.read_bytes() for p in (out / "shards").iterdir()}
    assert outs["auto"] == outs["tiktoken"]

    # The small auto build ran no fastokens: its head start was spent for nothing, so the record is gone and
    # the next build begins none, until a build loads fastokens again (gigatoken alone, tiktoken, HF: the same).
    assert not os.path.exists(rec)
    loads, _, fifth = build("fifth")
    assert loads == ["packer-fastokens-load"] and fifth == first and os.path.exists(rec)
