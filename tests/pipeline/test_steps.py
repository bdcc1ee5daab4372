"""End-to-end properties of ``packer build``: every token once, in order; determinism; resume."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from packer import BuildConfig, build
from packer.errors import PackerError

from tests._cli import error_lines
from tests._services import folder_files
from tests.conftest import REPO, expected_tokens, packer_cli, read_documents

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu café 東京 😀 \n".split(" ")


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def make_corpus(root, seed=0, n=40, long_words=3000) -> list[str]:
    """Write a mixed-format corpus; return its documents in packer's reading order."""
    rng = random.Random(seed)
    docs = {}
    os.makedirs(root / "a_txt" / "sub", exist_ok=True)
    txt = []
    for i in range(6):
        t = _text(rng, rng.choice([3, 50, 400]))
        p = root / "a_txt" / ("sub" if i % 2 else "") / f"{i}.txt"
        p.write_text(t, encoding="utf-8")
        txt.append((str(p), t))
    docs["a"] = [t for _, t in sorted(txt)]

    def texts(k):
        return [_text(rng, int(rng.lognormvariate(3, 1.5)) + 1) if i % 9 else _text(rng, long_words) for i in range(k)]

    docs["b"] = texts(n)
    with open(root / "b.jsonl", "w", encoding="utf-8") as f:
        for t in docs["b"]:
            f.write(json.dumps({"text": t, "id": 1}) + "\n")
    docs["c"] = texts(n)
    with gzip.open(root / "c.jsonl.gz", "wt", encoding="utf-8") as f:
        for t in docs["c"]:
            f.write(json.dumps({"text": t}) + "\n")
    docs["d"] = texts(n)
    blob = "".join(json.dumps({"text": t}) + "\n" for t in docs["d"]).encode()
    (root / "d.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(blob))
    docs["e"] = texts(n)
    pq.write_table(pa.table({"text": docs["e"]}), root / "e.parquet", row_group_size=7)
    return docs["a"] + docs["b"] + docs["c"] + docs["d"] + docs["e"]


@pytest.mark.parametrize("mode", ["bfd", "concat"])
@pytest.mark.parametrize("tok", ["bytes", "gpt2"])
def test_round_trip_every_token_once_in_order(tmp_path, mode, tok, request):
    tok_path = request.getfixturevalue("gpt2_path") if tok == "gpt2" else None
    corpus = tmp_path / "corpus"
    texts = make_corpus(corpus)
    seq_len = 128
    out = str(tmp_path / "out")
    res = build(BuildConfig.of(inputs=(str(corpus),), out=out, seq_len=seq_len, tokenizer=tok_path, pack=mode, workers=1, unit_bytes=20_000))
    got, m = read_documents(out)
    want = expected_tokens(texts, tok_path)
    assert len(got) == len(want) == m["totals"]["documents"]
    for g, w in zip(got, want):
        assert g.tolist() == w
    assert m["totals"]["tokens"] == sum(len(w) for w in want)
    assert m["totals"]["slots"] - m["totals"]["padding"] == m["totals"]["tokens"]
    assert len(m["shards"]) > 3, "small units give several shards"
    if mode == "bfd":
        # A document that fits in a row appears whole, as a single piece.
        for sh in m["shards"]:
            t = pa.ipc.open_file(os.path.join(out, sh["path"])).read_all()
            count: dict[int, int] = {}
            for idx in t.column("doc_index").to_pylist():
                for d in idx:
                    count[d] = count.get(d, 0) + 1
            lens: dict[int, int] = {}
            for ls, idx in zip(t.column("doc_lens").to_pylist(), t.column("doc_index").to_pylist()):
                for n, d in zip(ls, idx):
                    lens[d] = lens.get(d, 0) + n
            for d, n in lens.items():
                assert count[d] == -(-n // seq_len), "fewest pieces: ceil(len / seq_len)"
    assert res.units_run == len(m["shards"])


def test_no_eos(tmp_path):
    corpus = tmp_path / "c"
    texts = make_corpus(corpus, seed=3, n=10)
    out = str(tmp_path / "out")
    build(BuildConfig.of(inputs=(str(corpus),), out=out, seq_len=64, eos=False, workers=1))
    got, m = read_documents(out)
    assert [g.tolist() for g in got] == expected_tokens(texts, None, eos=False)
    assert m["eos_id"] is None


def test_byte_identical_across_worker_counts(tmp_path, gpt2_path):
    corpus = tmp_path / "c"
    make_corpus(corpus, seed=1)
    outs = []
    for w in (1, 2):
        out = str(tmp_path / f"out{w}")
        build(BuildConfig.of(inputs=(str(corpus),), out=out, seq_len=96, tokenizer=gpt2_path, workers=w, unit_bytes=15_000))
        outs.append(folder_files(out))
    assert outs[0].keys() == outs[1].keys()
    assert len([k for k in outs[0] if k.endswith(".arrow")]) >= 4
    for k in outs[0]:
        assert outs[0][k] == outs[1][k], k


def test_sigkill_mid_build_then_resume_equals_clean_build(tmp_path):
    corpus = tmp_path / "c"
    os.makedirs(corpus)
    rng = random.Random(7)
    for i in range(12):  # 12 units of ~256 KB each
        with open(corpus / f"{i:02d}.jsonl", "w") as f:
            for _ in range(300):
                f.write(json.dumps({"text": _text(rng, rng.randint(20, 250))}) + "\n")
    clean = str(tmp_path / "clean")
    args = ["--seq-len", "256", "--unit-mb", "0.2", "--workers", "2", "-q"]
    r = packer_cli("build", str(corpus), clean, *args)
    assert r.returncode == 0, r.stderr
    out = str(tmp_path / "out")
    p = subprocess.Popen([sys.executable, "-m", "packer.cli", "build", str(corpus), out, *args], start_new_session=True)
    deadline = time.time() + 60
    units = os.path.join(out, "units")
    while time.time() < deadline:
        if os.path.isdir(units) and len(os.listdir(units)) >= 2:
            break
        time.sleep(0.005)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert not os.path.exists(os.path.join(out, "manifest.json")), "killed before the end: no manifest"
    r = packer_cli("build", str(corpus), out, *args, "--resume")
    assert r.returncode == 0, r.stderr
    assert folder_files(out) == folder_files(clean)
    r = packer_cli("build", str(corpus), out, *args, "--resume")  # a finished build: no-op
    assert r.returncode == 0 and folder_files(out) == folder_files(clean)


def test_sample_data_awkward_records_are_counted(sample_build):
    m = json.load(open(os.path.join(sample_build, "manifest.json")))
    assert m["totals"]["skipped"] == {"empty": 2, "invalid_utf8": 2, "malformed_json": 1, "missing_field": 1, "not_string": 1}
    ex = m["totals"]["skipped_examples"]
    assert "sample_data/corpus.jsonl:23" in ex["malformed_json"][0]
    assert any("binary.txt" in e for e in ex["invalid_utf8"])
    # 40 txt files + 900 + 500 + 500 + 500 records, minus what was skipped
    assert m["totals"]["documents"] == 40 + 900 + 500 + 500 + 500


@pytest.mark.parametrize("ext", ["gz", "zst"])
def test_truncated_archive_keeps_records_before_the_break(tmp_path, ext):
    texts = [f"document number {i} " * 20 for i in range(3000)]
    raw = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    blob = gzip.compress(raw) if ext == "gz" else zstandard.ZstdCompressor().compress(raw)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / f"x.jsonl.{ext}").write_bytes(blob[: len(blob) // 2])
    out = str(tmp_path / "out")
    build(BuildConfig.of(inputs=(str(tmp_path / "in"),), out=out, seq_len=64, workers=1))
    got, m = read_documents(out)
    assert m["totals"]["skipped"].get("truncated") == 1
    n = len(got)
    assert 0 < n < 3000
    assert [g.tolist() for g in got] == expected_tokens(texts[:n], None)


def test_large_vocab_uses_uint32(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(70_000)}
    vocab["[UNK]"] = 70_000
    vocab["</s>"] = 70_001
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["</s>"])
    tok_path = str(tmp_path / "tok.json")
    tok.save(tok_path)
    texts = [" ".join(f"w{(i * 7919 + j) % 70_000}" for j in range(i % 50 + 1)) for i in range(200)]
    (tmp_path / "in").mkdir()
    with open(tmp_path / "in" / "a.jsonl", "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    out = str(tmp_path / "out")
    build(BuildConfig.of(inputs=(str(tmp_path / "in"),), out=out, seq_len=64, tokenizer=tok_path, workers=1))
    got, m = read_documents(out)
    assert m["dtype"] == "uint32"
    assert [g.tolist() for g in got] == [[int(w[1:]) for w in t.split()] + [70_001] for t in texts]
    assert max(int(g.max()) for g in got) > 65_535


# ---- user mistakes: one line, exit code 2, no traceback ------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["build", "nope/", "OUT"], "input not found: nope/"),
        (["build", "pyproject.toml", "OUT"], "unknown input format: pyproject.toml"),
        (["build", "sample_data", "OUT", "--seq-len", "1"], "--seq-len must be at least 2"),
        (["build", "sample_data", "OUT", "--tokenizer", "missing/tokenizer.json"], "tokenizer not found"),
        (["build", "sample_data", "OUT", "--tokenizer", "pyproject.toml"], "cannot load tokenizer pyproject.toml"),
        (["build", "sample_data"], "give at least one INPUT and then OUT"),
    ],
)
def test_user_errors_are_one_line(tmp_path, args, needle):
    repo = REPO
    args = [a.replace("OUT", str(tmp_path / "o")) for a in args]
    r = packer_cli(*args, cwd=repo)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert len(error_lines(r.stderr)) == 1, r.stderr


def test_output_rules(tmp_path):
    corpus = tmp_path / "c"
    make_corpus(corpus, n=5)
    out = str(tmp_path / "out")
    cfg = dict(inputs=(str(corpus),), out=out, seq_len=64, workers=1)
    build(BuildConfig.of(**cfg))
    with pytest.raises(PackerError, match="not empty"):
        build(BuildConfig.of(**cfg))
    with pytest.raises(PackerError, match="seq_len was 64, now 128"):
        build(BuildConfig.of(**{**cfg, "seq_len": 128}, resume=True))
    res = build(BuildConfig.of(**cfg, resume=True))
    assert res.units_run == 0
    build(BuildConfig.of(**{**cfg, "seq_len": 128}, overwrite=True))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(PackerError, match="files packer did not write"):
        build(BuildConfig.of(**{**cfg, "out": str(tmp_path / "mine")}, overwrite=True))


def test_strict_names_the_first_bad_record(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "fine"}\n{"text": 5}\n')
    r = packer_cli("build", str(tmp_path / "in"), str(tmp_path / "o"), "--strict", "-q")
    assert r.returncode == 1
    assert "a.jsonl:2: not_string" in r.stderr and "Traceback" not in r.stderr


def test_out_inside_input_is_not_read(tmp_path):
    corpus = tmp_path / "c"
    texts = make_corpus(corpus, n=5)
    out = str(corpus / "out")
    build(BuildConfig.of(inputs=(str(corpus),), out=out, seq_len=64, workers=1))
    build(BuildConfig.of(inputs=(str(corpus),), out=out, seq_len=64, workers=1, resume=True))
    got, _ = read_documents(out)
    assert len(got) == len(texts)


def test_a_packer_build_among_the_inputs_is_refused_pointing_at_repack(tmp_path):
    """Issue 53.5: a finished build as input (or in an input folder) is one line naming it and
    `packer repack`, exit 2, not a build of its shards' missing_field skips; OUT inside the input stays skipped."""
    corpus = tmp_path / "c"
    make_corpus(corpus, n=5)
    out = str(corpus / "out")
    build([str(corpus)], out, seq_len=64, workers=1, holdout=0.2)
    r = packer_cli("build", out, str(tmp_path / "o2"), "--seq-len", "128", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(error_lines(r.stderr)) == 1, r.stderr
    assert f"{out} is a packer build (manifest.json)" in r.stderr
    assert f"packer repack {out} OUT --seq-len N" in r.stderr
    assert not os.path.exists(tmp_path / "o2" / "manifest.json")
    with pytest.raises(PackerError, match=rf"{out} is a packer build \(manifest.json\) \(inside input {corpus}\)"):
        build([str(corpus)], str(tmp_path / "o3"), seq_len=64, workers=1)
    os.remove(os.path.join(out, "manifest.json"))  # an unfinished build: build.json beside its shards
    with pytest.raises(PackerError, match="unfinished packer build \\(build.json\\)"):
        build([str(corpus)], str(tmp_path / "o4"), seq_len=64, workers=1)
    build([str(corpus)], out, seq_len=64, workers=1, holdout=0.2, resume=True)  # OUT itself: skipped, as before


def test_build_path_does_not_import_torch(tmp_path):
    code = (
        "import sys, packer, packer.cli, packer.pipeline, packer.inspect.stats\n"
        f"packer.build(packer.BuildConfig.of(inputs=('sample_data',), out={str(tmp_path / 'o')!r}, workers=1))\n"
        "assert 'torch' not in sys.modules, 'torch imported by the build path'\n"
    )
    repo = REPO
    r = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_sizing_inputs_is_reported_up_to_every_file(tmp_path):
    """``on_sized(done, total)`` runs while discovery sizes the files: done never goes
    back, total is the number of input files, and the last call says all are done."""
    for i in range(700):  # over 256, so intermediate calls happen too
        (tmp_path / "in" / f"{i // 100}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / f"{i // 100}" / f"{i:04d}.txt").write_text(f"document {i}\n")
    calls = []
    r = build(BuildConfig.of(inputs=(str(tmp_path / "in"),), out=str(tmp_path / "out"), workers=1, quiet=True),
              on_sized=lambda done, total: calls.append((done, total)))
    assert r.manifest["totals"]["documents"] == 700
    assert calls[-1] == (700, 700) and len(calls) >= 3
    assert all(t == 700 for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_build_takes_every_option_by_keyword_typed_with_its_default(tmp_path):
    """build()'s signature (help(build), IPython and Jupyter completion) is made from the settings' fields:
    a field added to OutputSettings or RunSettings is a keyword of build() with no other edit."""
    import inspect

    from packer.pipeline import OPTIONS

    params = inspect.signature(build).parameters
    keywords = [p for p in params.values() if p.kind is p.KEYWORD_ONLY and p.name not in ("progress", "on_sized", "on_note", "exit_on_stop")]
    assert [(p.name, p.default) for p in keywords] == [(o.name, o.default) for o in OPTIONS]
    assert params["unit_mb"].annotation is float and params["limit"].annotation == (int | None)
    with pytest.raises(PackerError, match="unknown build option 'seqlen'; options are: .*seq_len"):
        build(str(tmp_path), str(tmp_path / "out"), seqlen=5)


@pytest.mark.parametrize("options, said", [
    (dict(seq_len="2048"), "--seq-len must be a whole number (got '2048': str)"),
    (dict(seq_len=2048.0), "--seq-len must be a whole number (got 2048.0: float)"),
    (dict(seq_len=True), "--seq-len must be a whole number (got True: bool)"),
    (dict(workers="2"), "--workers must be a whole number (got '2': str)"),
    (dict(overwrite="yes"), "--overwrite must be True or False (got 'yes': str)"),
    (dict(holdout="0.1"), "--holdout must be a number (got '0.1': str)"),
    (dict(tokenizer=3), "--tokenizer must be a string (got 3: int)"),
])
def test_build_refuses_an_option_of_another_type_in_one_line(tmp_path, options, said):
    """build(seq_len="2048") said "--seq-len must be at least 2 (got 2048)", and workers="2" was a TypeError from
    a comparison: the Python API gets no click to convert its values, so each is checked against its option's type."""
    with pytest.raises(PackerError) as e:
        build(str(tmp_path), str(tmp_path / "out"), **options)
    assert str(e.value) == said


def test_build_takes_numpy_numbers_and_paths_as_their_options(tmp_path):
    """What a script computes is often NumPy's (np.int64 is no int): taken as the number it is, recorded as JSON."""
    import pathlib

    src = tmp_path / "in.jsonl"
    src.write_text("".join(f'{{"text": "document {i} " }}\n' for i in range(50)))
    r = build(pathlib.Path(src), pathlib.Path(tmp_path / "out"), seq_len=np.int64(64), workers=np.int32(1),
              holdout=np.float32(0.1), overwrite=np.bool_(True), quiet=True)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["seq_len"] == 64 and type(manifest["seq_len"]) is int and r.units_run == 1
