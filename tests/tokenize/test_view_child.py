"""transformers' view of a model folder built in a torch-less child (packer/tokenize/view_child.py).

The suite's own process imports transformers early, so there resolves build the view in process; the
child runs in a fresh interpreter, as in a user's first ``packer build``: these tests start one."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

from packer.tokenize import resolve_tokenizer, view_child
from packer.tokenize import follows as F

from tests.tokenize.test_follows import TEXTS, llama2_like, qwen2_folder

pytest.importorskip("transformers")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A fresh interpreter: resolve FOLDER (or build it), then say what this process imported and checked.
FRESH = """
import json, os, sys
from packer.tokenize import resolve_tokenizer, tokenizer, view_child
from packer.tokenize.backend import tiktoken_backend
folder, mode = sys.argv[1], sys.argv[2]
children, checks = [], []
start, static_check = view_child.start, tiktoken_backend._static_check
tiktoken_backend._static_check = lambda *a: checks.append(1) or static_check(*a)  # the check a build runs once
start = view_child.start
view_child.start = lambda f: children.append(f) or start(f)
if mode == "build":
    from packer import build
    build([sys.argv[3]], sys.argv[4], seq_len=64, tokenizer=folder, workers=1, quiet=True)
    info = None
else:
    info = resolve_tokenizer(folder)
print(json.dumps({"children": len(children), "torch": sys.modules.get("torch") is not None,
                  "transformers": sys.modules.get("transformers") is not None,
                  "checked": len(checks),
                  "info": None if info is None else {"json": info.json, "fingerprint": info.fingerprint,
                                                     "notes": list(info.notes), "eos": info.eos_id}}))
"""


def fresh(tmp_path, *args) -> dict:
    env = dict(os.environ, PACKER_CACHE=str(tmp_path / "cache"), PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-c", FRESH, *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("make", [llama2_like, qwen2_folder], ids=["llama2 (differs)", "qwen2"])
def test_a_first_resolve_builds_the_view_in_a_child_without_torch_and_gets_the_same_tokenizer(tmp_path, make):
    folder = make(tmp_path / "m")
    here = resolve_tokenizer(folder)  # in process: this process has transformers already
    got = fresh(tmp_path, folder, "resolve")
    assert got["children"] == 1
    assert not got["transformers"] and not got["torch"]  # neither is imported by the build's process
    assert got["info"] == {"json": here.json, "fingerprint": here.fingerprint, "notes": list(here.notes),
                           "eos": here.eos_id}


def test_a_first_build_checks_the_backend_once_while_the_child_runs(tmp_path):
    """The backend is checked on the guessed tokenizer while transformers builds its view; the guess held
    (the rule's tokenizer is transformers'), so the build checked one tokenizer, not two."""
    folder = llama2_like(tmp_path / "m")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t + " two tw"}) + "\n" for t in TEXTS * 20))
    got = fresh(tmp_path, folder, "build", inp, tmp_path / "out")
    assert got["children"] == 1 and not got["torch"]
    assert got["checked"] == 1
    from packer import build
    from packer.shards import read_manifest

    here = build([str(inp)], str(tmp_path / "here"), seq_len=64, tokenizer=folder, workers=1, quiet=True)
    assert [s["xxh3_128"] for s in read_manifest(str(tmp_path / "out"))["shards"]] == \
        [s["xxh3_128"] for s in here.manifest["shards"]]


class _Proc:
    def __init__(self, rc, out):
        self.returncode, self._out, self.stdout = rc, out, None

    def communicate(self):
        return self._out, b""

    def poll(self):
        return self.returncode


@pytest.mark.parametrize("rc,out", [(1, b""), (0, b"not json"),
                                    (0, json.dumps({"view": None, "who": "",
                                                    "trouble": "m: transformers cannot load it (needs PyTorch)"}).encode())])
def test_a_child_that_fails_or_wants_torch_leaves_the_view_to_this_process(tmp_path, rc, out):
    folder = llama2_like(tmp_path / "m")
    assert view_child.Pending(_Proc(rc, out)).result() is None
    from packer.tokenize.sources import _load_hf

    tok, said = F.as_used(folder, _load_hf(folder), "transformers", view_child.Pending(_Proc(rc, out)))
    ref, ref_said = F.as_used(folder, _load_hf(folder), "transformers")
    assert tok.to_str() == ref.to_str() and said == ref_said and "pre-tokenizer" in said


def test_no_child_where_transformers_or_torch_is_loaded_or_absent(tmp_path, monkeypatch):
    folder = llama2_like(tmp_path / "m")
    assert view_child.start(folder) is None  # this process has transformers: in process costs nothing
    monkeypatch.setitem(sys.modules, "transformers", None)  # not importable: the recorded rule decides
    monkeypatch.setitem(sys.modules, "torch", None)
    assert view_child.start(folder) is None


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        found.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux /proc")
def test_the_view_child_dies_with_a_sigkilled_build(tmp_path):
    """No process outlives its build (issue 53): a SIGKILL of ``packer build`` while transformers' view is
    built in the child takes the child with it at once (it lived on 0.6-2.0 s)."""
    import signal
    import time

    from packer.procs import ended
    from tests.conftest import REAL_TOKENIZERS

    folder = REAL_TOKENIZERS["llama3"]
    if not os.path.exists(os.path.join(folder, "tokenizer.json")):
        pytest.skip("no Llama 3 folder (../shared/data/llama3)")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS * 20))
    env = dict(os.environ, PACKER_CACHE="off", PYTHONPATH=REPO)
    build = subprocess.Popen([sys.executable, "-m", "packer.cli", "build", str(inp), str(tmp_path / "out"),
                              "--seq-len", "64", "--tokenizer", folder, "-q"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end, child = time.monotonic() + 60, None
        while child is None and build.poll() is None and time.monotonic() < end:
            for pid in _children(build.pid):
                with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"view_child" in f.read():
                        child = pid
            time.sleep(0.01)
        assert child is not None, "the build never started its view child"
        time.sleep(0.3)  # the child well into its work (transformers imported or importing)
        build.kill()
        gone = time.monotonic() + 0.5
        while not ended(child) and time.monotonic() < gone:
            time.sleep(0.01)
        assert ended(child), "the view child outlived its build by 0.5 s"
    finally:
        build.kill()
        build.wait()
