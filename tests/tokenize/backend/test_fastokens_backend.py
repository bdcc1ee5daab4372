"""The fastokens encoder gives the tiktoken encoder's ids (HF's) exactly, or is not used.

Tokenizers are the small families built now (bench/families.py), so this runs without ../shared.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("fastokens")
pytest.importorskip("tiktoken")

from tokenizers import Tokenizer  # noqa: E402

from packer.tokenize.backend import fastokens_backend as F  # noqa: E402
from packer.tokenize import resolve_tokenizer  # noqa: E402
from packer.tokenize.backend import tiktoken_backend as T  # noqa: E402
from packer.tokenize import Encoder, choose_backend  # noqa: E402

from tests.conftest import SAMPLE, invoke, write_jsonl  # noqa: E402

TEXTS = [
    "Hello world, it's 2024-01-01!", "", "  spaces   and\ttabs\n\n", "日本語のテキスト。", "e\u0301 Z̷a̸l̶g̵o", "😀" * 30,
    "a<|endoftext|>b", "<|begin_of_text|>x<|eot_id|>", "<|im_start|>user", "x" * 5000, "don't I'M we'll", "1234567",
]


@pytest.fixture(scope="module")
def families(small_family) -> dict[str, str]:
    return {name: small_family(name) for name in ("gpt2-like", "llama3-like", "qwen-like")}


@pytest.fixture(scope="module", params=["gpt2-like", "llama3-like", "qwen-like"])
def pair(request, families):
    """(tiktoken encoder, the fastokens encoder faster() checked over it, the HF tokenizer) of one family."""
    info = resolve_tokenizer(families[request.param])
    base = T.TiktokenEncoder(info.json)
    hf = Tokenizer.from_str(info.json)
    fast, hard = F.faster(base, info.json, info.fingerprint, lambda: hf)
    assert isinstance(fast, F.FastokensEncoder) and hard.ok and hard.texts > 300
    return base, fast, hf


def corpus() -> list[str]:
    """Sample texts as a build reads them (sample_data holds bad records on purpose), and TEXTS."""
    from packer.formats import Skip, discover, plan_slices, read_slice

    out = []
    for sl, _ in plan_slices(discover([os.path.join(SAMPLE, "corpus.jsonl")]).files, 1 << 30):
        out += [r.text for r in read_slice(sl) if not isinstance(r, Skip)]
    return out[:200] + TEXTS


@pytest.mark.parametrize("pre,post", [((), (7,)), ((1, 2), (3,)), ((), ()), ((5,), ()), ((), (8, 9))])
def test_same_ids_as_tiktoken_and_hf(pair, pre, post):
    base, fast, hf = pair
    texts = corpus()
    a, b = base.encode_flat(texts, post, pre), fast.encode_flat(texts, post, pre)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and b[0].dtype == np.uint32
    ref = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert [x.tolist() for x in fast.encode_arrays(texts)] == ref


def test_added_token_texts_go_to_hf(pair):
    base, fast, hf = pair
    before = fast.to_hf
    fast.encode_flat(["plain text", "a<|endoftext|>b"], None)
    assert fast.to_hf == before + ("<|endoftext|>" in base.conv.added)


def test_lone_surrogate_fails_as_hf_does(pair):
    base, fast, _ = pair
    with pytest.raises(Exception) as e_fast:
        fast.encode_flat(["fine", "a\udc80b"], 7)
    with pytest.raises(Exception) as e_base:
        base.encode_flat(["fine", "a\udc80b"], 7)
    assert type(e_fast.value) is type(e_base.value)


@pytest.mark.parametrize("texts", [40, F.FEW_TEXTS + 1])  # a slice copy a text, then one masked copy
def test_with_around_matches_a_loop(texts):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 5, texts)
    ids = rng.integers(0, 1000, int(lengths.sum())).astype(np.uint32)
    for pre, post in [((1,), (2, 3)), ((), (4,)), ((5, 6), ())]:
        out, full = F.with_around(ids, lengths, pre, post)
        parts, at = [], 0
        for n in lengths:
            parts += [*pre, *ids[at:at + n].tolist(), *post]
            at += n
        assert out.tolist() == parts and full.tolist() == (lengths + len(pre) + len(post)).tolist()


def _child(enc, texts, q):
    q.put([a.tolist() for a in enc.encode_arrays(texts)])


def test_forked_child_encodes(pair):
    """The build forks its workers after the parent encoded (the checks): the child must not hang."""
    _, fast, _ = pair
    texts = corpus() * 3
    want = [a.tolist() for a in fast.encode_arrays(texts)]
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_child, args=(fast, texts, q))
    p.start()
    got = q.get(timeout=60)
    p.join(30)
    assert got == want and p.exitcode == 0


def test_no_threads_of_its_own(families):
    """One encoder per core: fastokens encodes on the calling thread (its pool held to one thread)."""
    code = ("import os, sys; from packer.tokenize import resolve_tokenizer\n"
            "from packer.tokenize.backend import tiktoken_backend as T, fastokens_backend as F\n"
            "info = resolve_tokenizer(sys.argv[1]); n = len(os.listdir('/proc/self/task'))\n"
            "enc = F.FastokensEncoder(info.json, T.TiktokenEncoder(info.json))\n"
            "enc.encode_flat(['some words here, and more. ' * 50] * 400, 0)\n"
            "print(n, len(os.listdir('/proc/self/task')))")
    env = {k: v for k, v in os.environ.items() if k != "FASTOKENS_BPE_THREADS"}
    r = subprocess.run([sys.executable, "-c", code, families["gpt2-like"]], capture_output=True, text=True, env=env,
                       timeout=120)
    before, after = map(int, r.stdout.split())
    assert after == before, r.stderr


def test_auto_picks_fastokens_and_tiktoken_stays_tiktoken(families):
    info = resolve_tokenizer(families["llama3-like"])
    auto = choose_backend(info, "auto", lambda: corpus()[:50])
    assert auto.backend == "fastokens" and "fastokens" in auto.backend_reason
    assert isinstance(Encoder(auto).tiktoken, F.FastokensEncoder)
    asked = choose_backend(info, "tiktoken", lambda: corpus()[:50])
    assert asked.backend == "tiktoken" and isinstance(Encoder(asked).tiktoken, T.TiktokenEncoder)
    # A worker that did not inherit the checked encoder builds one for the backend it is told.
    T._ENCODERS.clear()
    F._FASTER.clear()
    assert isinstance(Encoder(auto).tiktoken, F.FastokensEncoder)


def test_not_used_where_it_cannot_load(families, monkeypatch):
    info = resolve_tokenizer(families["gpt2-like"])
    base = T.TiktokenEncoder(info.json)
    F._FASTER.clear()
    monkeypatch.setattr(F, "FastokensEncoder", lambda *a: (_ for _ in ()).throw(ValueError("unsupported")))
    assert F.faster(base, info.json, info.fingerprint + "x", lambda: None) == (base, None)
    F._FASTER.clear()


def test_build_shards_identical_to_tiktoken(tmp_path, families, monkeypatch):
    monkeypatch.setattr(F, "OVER_TIKTOKEN", 0)  # a small input would keep tiktoken (worth_it)
    src = tmp_path / "in.jsonl"
    write_jsonl(str(src), corpus() * 3)
    outs = {}
    for backend in ("auto", "tiktoken"):
        out = tmp_path / backend
        invoke("build", str(src), str(out), "--seq-len", "64", "--workers", "1", "--tokenizer",
               families["qwen-like"], "--tokenizer-backend", backend)
        outs[backend] = {p.name: p.read_bytes() for p in (out / "shards").iterdir()}
    assert outs["auto"] and outs["auto"] == outs["tiktoken"]


def test_two_workers_check_on_a_worker_with_fastokens(tmp_path, families, monkeypatch):
    """The deferred input check (on a worker, packer/pipeline/backend_check.py) runs with fastokens too."""
    from packer import build

    monkeypatch.setattr(F, "OVER_TIKTOKEN", 0)
    src = tmp_path / "in.jsonl"
    write_jsonl(str(src), [f"doc {i}: " + t for i, t in enumerate(corpus() * 4)])
    got = {}
    for backend, workers in (("auto", 2), ("tiktoken", 1)):
        r = build([str(src)], str(tmp_path / backend), tokenizer=families["llama3-like"], seq_len=128,
                  workers=workers, unit_mb=0.02, quiet=True, tokenizer_backend=backend)
        assert r.manifest["tokenizer"]["backend"] == ("fastokens" if backend == "auto" else "tiktoken")
        d = tmp_path / backend / "shards"
        got[backend] = {p.name: p.read_bytes() for p in d.iterdir()}
    assert len(got["auto"]) > 1 and got["auto"] == got["tiktoken"]


def test_a_small_build_keeps_tiktoken(tmp_path, families):
    """Loading fastokens is serial start (2 s for Llama 3): a build of less than OVER_TIKTOKEN times its
    tokenizer.json does not pay it, whatever its worker count (the manifest records the backend); the ids are
    the same either way. Against HF (tiktoken cannot run it) it pays from a quarter of the JSON's size."""
    from packer import build

    src = tmp_path / "in.jsonl"
    write_jsonl(str(src), [t[:200] for t in corpus()[:40]])  # well under 3x the small tokenizer.json (16 KB)
    size = len(resolve_tokenizer(families["gpt2-like"]).json)
    assert not F.worth_it(os.path.getsize(src), size) and F.worth_it(3 * size, size)
    assert F.worth_it(size // 4 + 1, size, "hf") and not F.worth_it(size // 4 + 1, size, "tiktoken")
    r = build([str(src)], str(tmp_path / "o"), tokenizer=families["gpt2-like"], seq_len=64, workers=1, quiet=True)
    assert r.manifest["tokenizer"]["backend"] == "tiktoken"


def test_tiktokens_encoder_is_built_only_where_it_encodes(families):
    """Under fastokens tiktoken's CoreBPE (3% of a 1-worker build) is never built once the checks are on
    record; under tiktoken it is built before the workers fork; built late, it gives the same ids."""
    info = resolve_tokenizer(families["gpt2-like"])
    choose_backend(info, "auto", lambda: corpus()[:50])  # (records the checks, if not yet)
    got = {}
    for backend, built in (("tiktoken", True), ("auto", False)):
        T._STATIC.clear(), T._ENCODERS.clear(), F._FASTER.clear()
        enc = got[backend] = Encoder(choose_backend(info, backend, lambda: corpus()[:50])).tiktoken
        base = getattr(enc, "base", enc)
        assert (base._fns is not None) == built and isinstance(enc, F.FastokensEncoder) != built
    texts = corpus()
    a, b = got["tiktoken"].encode_flat(texts, 7), base.encode_flat(texts, 7)  # base: built now, on its first encode
    assert base._fns is not None and np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_a_preload_is_taken_by_the_encoder_of_that_json_and_leaves_no_thread(families, monkeypatch):
    """choose starts fastokens' load in a thread (a first build: it runs beside the checks); the encoder of
    that very JSON takes it, and no thread is left running when choose returns (the build forks)."""
    import threading

    info = resolve_tokenizer(families["qwen-like"])
    base = T.TiktokenEncoder(info.json)
    F.preload(info.json)
    assert any(t.name == "packer-fastokens-load" for t in threading.enumerate())
    import fastokens

    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", lambda js: pytest.fail("loaded again"))
    enc = F.FastokensEncoder(info.json, base)
    assert enc.encode_lists(TEXTS) == base.encode_lists(TEXTS)
    monkeypatch.undo()
    F.preload(info.json)
    F.settle()  # nothing took it: dropped, and the thread joined
    assert not F._PRELOAD and not any(t.name == "packer-fastokens-load" for t in threading.enumerate())
    # Through choose: the check passes with the preloaded encoder, and no load thread outlives it.
    F._FASTER.clear()
    T._STATIC.clear()
    T._ENCODERS.clear()
    auto = choose_backend(info, "auto", lambda: corpus()[:20])
    assert auto.backend == "fastokens"
    assert not F._PRELOAD and not any(t.name == "packer-fastokens-load" for t in threading.enumerate())


def test_a_preload_of_another_json_is_not_taken(families):
    a, b = resolve_tokenizer(families["qwen-like"]), resolve_tokenizer(families["gpt2-like"])
    F.preload(a.json)
    enc = F.FastokensEncoder(b.json, T.TiktokenEncoder(b.json))
    assert not F._PRELOAD  # joined and dropped
    assert enc.encode_lists(TEXTS) == T.TiktokenEncoder(b.json).encode_lists(TEXTS)
