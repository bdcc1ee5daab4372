"""Shared fixtures and helpers: tokenizers, small corpora, finished builds, the CLI runners,
and reading documents back out of shards with pyarrow alone. (Importable as ``tests.conftest``.)"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "sample_data")
# Bytecode is cached for the suite and every process it starts, whatever PYTHONDONTWRITEBYTECODE says (set on the
# machines this project runs on): an editable install's packer and the test modules otherwise compile from source
# in each of the suite's hundreds of processes (the CLI's children, pools' workers, xdist's workers). Measured on
# tests/pipeline + tests/inspect over two workers: 247 -> 215 CPU-s, 241 -> 228 s (docs/architecture.md, the suite).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Engine checks are recorded per machine (packer/tokenize/backend/check_cache.py): the tests keep their own record.
if "PACKER_CACHE" not in os.environ:  # the suite's own record, removed when the suite ends
    os.environ["PACKER_CACHE"] = __import__("tempfile").mkdtemp(prefix="packer-test-cache-")
    __import__("atexit").register(shutil.rmtree, os.environ["PACKER_CACHE"], True)
# A suite started in the background of a non-interactive shell (`cmd &`, nohup, some CI runners) inherits
# SIGINT ignored, and so would every packer it starts (Python keeps an inherited SIG_IGN): the Ctrl-C tests
# send what a terminal sends, so the suite takes Python's own handler back (its children get the default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
SHARED = os.path.abspath(os.path.join(REPO, "..", "shared", "data"))
if os.environ.get("PACKER_TEST_NO_SHARED"):  # run as a fresh clone would, without ../shared
    SHARED = os.path.join(REPO, "no-such-shared-folder")
GPT2 = os.path.join(SHARED, "gpt2-tokenizer.json")
# The real files, used when present (tests skip cleanly without them).
REAL_TOKENIZERS = {"gpt2": GPT2, "llama3": os.path.join(SHARED, "llama3"),
                   "mistral-v3": os.path.join(SHARED, "mistral-v3"), "minilm": os.path.join(SHARED, "minilm")}
# The folders ../shared/tools/fetch-tokenizers fetches (.ci/run does), each only where its tokenizer.json is.
FETCHED = os.environ.get("PACKER_TEST_TOKENIZERS") or os.path.expanduser("~/.cache/packer-test-tokenizers")
if not os.environ.get("PACKER_TEST_NO_SHARED"):
    REAL_TOKENIZERS.update({n: os.path.join(FETCHED, n) for n in ("qwen3", "gemma3", "llama2", "deepseek_v3")
                            if os.path.exists(os.path.join(FETCHED, n, "tokenizer.json"))})


def full_run(config) -> bool:
    """Was the unsampled sweep asked for (``-m`` naming full, or PACKER_TEST_FULL=1)? A sampled test asks it
    (``request.config``) to take its whole range there."""
    return bool(os.environ.get("PACKER_TEST_FULL")) or "full" in (config.getoption("markexpr", "") or "")


# The real families dearest to load and check (Gemma 3: a 262k vocabulary, 20-40 s a check where others take
# 3-15): a sampled sweep takes them last, so they are checked where a module's checks go round to them
# (tests/tokenize/test_real_families.py), not in every module's sample.
DEAR = ("gemma3",)


def rotation(present, checks, per: int, seed: str, last=DEAR) -> set:
    """The (check, family) pairs a sampled sweep keeps in the default run (issue 54): each of ``checks`` in
    turn takes the next ``per`` of the ``present`` families from one order shuffled by ``seed`` (a string: the
    same order every run, never the clock), the families in ``last`` put at its end, wrapping round. So every
    check runs, and every present family is loaded somewhere once there are enough checks (len(checks) * per
    >= len(present)); the other pairs are the sweep's rest, marked ``full`` by the module's ``in_full_sweep``
    (``sampled_out``)."""
    order = random.Random(seed).sample(list(present), len(present))
    order = [f for f in order if f not in last] + [f for f in order if f in last]
    if not order:
        return set()
    return {(check, order[(i * per + j) % len(order)]) for i, check in enumerate(checks) for j in range(per)}


def sampled_out(item, param: str, present, kept: set, check=None) -> bool:
    """Is ``item`` outside ``kept`` (``rotation``'s pairs)? Its family is its ``param`` fixture param, its
    check ``check(item)`` (default: the test function's name). A family not present stays in: it skips."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    name = params.get(param)
    if name not in present:
        return False
    return ((check or (lambda it: it.originalname))(item), name) not in kept


def one_check_sample(present, check: str, seed: str, per: int = 2, param: str = "name"):
    """``in_full_sweep`` for a module whose one test ``check`` runs over real folders (its ``param`` fixture
    param): the default run keeps ``per`` of the ``present`` ones (``rotation``, seeded by ``seed``); the rest,
    and its other tests never, are marked full."""
    kept = rotation(present, [check], per, seed)
    return lambda item: item.originalname == check and sampled_out(item, param, present, kept)


def one_in(items: list, step: int, seed: str, part: str) -> list:
    """A seeded 1-in-``step`` sample of ``items`` (part "sample": every step-th from a start that ``seed``
    picks) or the rest (part "rest"): the two parts together are ``items``, each item in exactly one."""
    start = random.Random(seed).randrange(step)
    return [x for i, x in enumerate(items) if (i % step == start) == (part == "sample")]


def _starts_ray(item) -> bool:
    """Does the test start a Ray of its own? Such tests find Ray's workers by process title across the
    machine (tests/pipeline/engines/test_ray.py kills the first ``ray::packer_unit`` it sees), so under
    pytest-xdist (the README's ``-n``; ``--dist loadgroup``) they share one worker and never overlap."""
    return item.path.name in ("test_ray.py", "test_ray_cluster.py") or "ray" in item.name.split("[")[0].split("_")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns the xdist_group marks into the nodeid's "@group"
def pytest_collection_modifyitems(config, items):
    """Tests marked ``full`` (the unsampled rest of a sweep) run only where asked: ``-m`` naming full, or
    PACKER_TEST_FULL=1; otherwise they are deselected (counted as such in pytest's summary). A test module
    may define ``in_full_sweep(item)``: the items it says so are marked full here (a sample over a fixture's
    params, which parametrize marks cannot express per test)."""
    for item in items:
        pick = getattr(getattr(item, "module", None), "in_full_sweep", None)
        if pick is not None and pick(item):
            item.add_marker(pytest.mark.full)
        if _starts_ray(item):  # one xdist worker runs them all, one after another 
            item.add_marker(pytest.mark.xdist_group("ray"))
    if full_run(config):
        return
    left = [item for item in items if item.get_closest_marker("full")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if not item.get_closest_marker("full")]


@pytest.fixture(autouse=True)
def forked_workers(monkeypatch):
    """Threads that earlier tests left in this pytest process (a library's I/O loop, say) do not send a build's
    pool to a forkserver (``procs.can_fork``): each test sees the process a fresh run would. Under xdist's order
    they did, and a test whose patches must reach the workers (only a fork carries them) failed. Threads a test
    starts itself still count (the forkserver path's own tests)."""
    import threading

    from packer import procs

    left = tuple(t.name for t in threading.enumerate() if t is not threading.current_thread())
    real = procs.can_fork
    monkeypatch.setattr(procs, "can_fork", lambda ignore=(): real(ignore=tuple(ignore) + left))


@pytest.fixture(scope="session")
def small_family(tmp_path_factory):
    """``small_family(name)``: the folder of bench/families.py's small faithful tokenizer ``name`` (gpt2-like,
    llama3-like, ...), trained on first use and once per run (a second or two each). Read-only: a test that
    changes one copies the folder first (``copy_family``)."""
    root, made = tmp_path_factory.mktemp("small_families"), {}

    def folder(name: str) -> str:
        if name not in made:
            made.update(load_script("bench/families.py").build_all(str(root), names=[name]))
        return made[name]

    return folder


def copy_family(small_family, name: str, dst) -> str:
    """A copy of ``small_family(name)``'s folder at ``dst``, to change."""
    return shutil.copytree(small_family(name), str(dst))


@pytest.fixture(scope="session")
def gpt2_path(small_family) -> str:
    """The real GPT-2 tokenizer.json where ../shared/data has it; else a small byte-level BPE of the same
    layout (GPT-2 pattern, <|endoftext|>, truncation max_length 50 set), built now (bench/families.py)."""
    if os.path.exists(GPT2):
        return GPT2
    return os.path.join(small_family("gpt2-like"), "tokenizer.json")


@pytest.fixture(scope="session")
def real_gpt2() -> str:
    """The real GPT-2 file only (tests of its exact ids or size)."""
    if not os.path.exists(GPT2):
        pytest.skip("../shared/data/gpt2-tokenizer.json not present")
    return GPT2


def write_jsonl(path, texts, field="text"):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({field: t}) + "\n")
    return str(path)


@pytest.fixture(scope="session")
def sample_build(tmp_path_factory) -> str:
    """sample_data built with the built-in byte tokenizer, seq_len 256, small units."""
    from packer import BuildConfig, build

    out = str(tmp_path_factory.mktemp("sample") / "out")
    build(BuildConfig.of(inputs=(SAMPLE,), out=out, seq_len=256, workers=1, unit_bytes=1 << 20))
    return out


@pytest.fixture(scope="session")
def sample_build_gpt2(tmp_path_factory, gpt2_path) -> str:
    """sample_data built with the real GPT-2 tokenizer, seq_len 512."""
    from packer import BuildConfig, build

    out = str(tmp_path_factory.mktemp("sample_gpt2") / "out")
    build(BuildConfig.of(inputs=(SAMPLE,), out=out, seq_len=512, tokenizer=gpt2_path, workers=1, unit_bytes=1 << 20))
    return out


@pytest.fixture
def copy_build(tmp_path):
    """Copy a finished build to a scratch folder (for tests that damage it)."""

    def _copy(src: str) -> str:
        dst = str(tmp_path / "copy")
        shutil.copytree(src, dst)
        return dst

    return _copy


def load_script(relpath: str):
    """A script of the repo (examples/, bench/) imported as a module, once per session.

    Registered in sys.modules before it runs: dataclasses look their module up then.
    """
    import importlib.util
    import sys

    name = os.path.splitext(os.path.basename(relpath))[0]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relpath))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def packer_cli(*args, env=None, timeout=120, **kw) -> subprocess.CompletedProcess:
    """``packer ARGS`` in a child process (as a user runs it), in a session of its own: a fault
    that kills the build's process group must not kill pytest."""
    return subprocess.run([sys.executable, "-m", "packer.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, start_new_session=True, **kw)


def invoke(*args):
    """Run the CLI in-process; fail the test on any uncaught exception (a traceback)."""
    from click.testing import CliRunner

    from packer.cli import main

    res = CliRunner().invoke(main, list(args))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"uncaught {type(res.exception).__name__}: {res.exception}") from res.exception
    assert "Traceback" not in res.output
    return res


def read_documents(out: str) -> tuple[list[np.ndarray], dict]:
    """Reassemble every document from the shards, in input order, using only pyarrow."""
    m = json.load(open(os.path.join(out, "manifest.json")))
    seq_len = m["seq_len"]
    docs = []
    for sh in m["shards"]:
        t = pa.ipc.open_file(pa.memory_map(os.path.join(out, sh["path"]))).read_all()
        ids = t.column("input_ids").combine_chunks().flatten().to_numpy().reshape(-1, seq_len)
        pieces: dict[int, list[tuple[int, np.ndarray]]] = {}
        for r, (lens, idx, offs) in enumerate(zip(t.column("doc_lens").to_pylist(), t.column("doc_index").to_pylist(), t.column("doc_offset").to_pylist())):
            assert sum(lens) <= seq_len
            assert (ids[r, sum(lens):] == m["pad_id"]).all()
            slot = 0
            for n, d, o in zip(lens, idx, offs):
                pieces.setdefault(d, []).append((o, ids[r, slot : slot + n]))
                slot += n
        assert sorted(pieces) == list(range(len(pieces))), "doc_index runs 0..n-1 within a shard"
        for d in range(len(pieces)):
            ps = sorted(pieces[d], key=lambda p: p[0])
            pos = 0
            for o, arr in ps:
                assert o == pos, "pieces of a document tile it exactly, with no gap or overlap"
                pos += len(arr)
            docs.append(np.concatenate([a for _, a in ps]))
    return docs, m


def expected_tokens(texts, tokenizer_path, eos=True):
    if tokenizer_path is None:
        return [np.frombuffer(t.encode(), np.uint8).astype(np.int64).tolist() + ([256] if eos else []) for t in texts]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    tok.no_truncation()
    eos_id = tok.token_to_id("<|endoftext|>")
    return [tok.encode(t, add_special_tokens=False).ids + ([eos_id] if eos else []) for t in texts]
