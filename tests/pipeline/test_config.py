"""--holdout, --limit, --dry-run, --summary-json, and the Python API taking the CLI's options."""

from __future__ import annotations

import json
import math
import os

import pytest

from packer import BuildConfig, PackedDataset, build
from packer.errors import PackerError
from packer.inspect.stats import check

from tests.formats.test_awkward_inputs import jl, run
from tests.conftest import read_documents
from tests._cli import cli, one_line


def texts_of(out: str) -> list[str]:
    docs, _ = read_documents(out)
    return [bytes(d[:-1].astype("uint8").tolist()).decode() for d in docs]


def tree(out: str) -> dict[str, bytes]:
    """Every file of a build folder, by relative path."""
    files = {}
    for root, _, names in os.walk(out):
        for n in names:
            p = os.path.join(root, n)
            files[os.path.relpath(p, out)] = open(p, "rb").read()
    return files


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    """3,000 distinct documents over three jsonl files, plus 50 that appear twice (equal texts)."""
    root = tmp_path_factory.mktemp("corpus")
    n = 0
    for f in range(3):
        recs = [{"text": f"document {n + i} " + "word " * ((n + i) % 37)} for i in range(1000)]
        n += 1000
        if f == 2:
            recs += [{"text": f"twice {i}"} for i in range(50)] * 2
        (root / f"part{f}.jsonl").write_bytes(jl(*recs))
    return str(root)


def test_holdout_same_bytes_whatever_the_workers_disjoint_and_binomial(corpus, tmp_path):
    p = 0.1
    outs = []
    for w in (1, 3):
        out = str(tmp_path / f"out{w}")
        build([corpus], out, seq_len=128, workers=w, unit_mb=0.02, holdout=p)
        outs.append(out)
    a, b = tree(outs[0]), tree(outs[1])
    assert any(k.startswith("holdout/shards/") for k in a) and a.keys() == b.keys()
    assert a == b, "every byte, both builds, whatever --workers"

    main, held = texts_of(outs[0]), texts_of(os.path.join(outs[0], "holdout"))
    everything = [json.loads(line)["text"] for f in sorted(os.listdir(corpus))
                  for line in open(os.path.join(corpus, f))]
    assert sorted(main + held) == sorted(everything), "each document lands in exactly one of the two"
    assert not set(main) & set(held), "no text is in both (equal texts go the same way)"
    n = len(set(everything))
    k = len(set(held))
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(k - n * p) < 4 * sigma, f"{k} of {n} distinct documents held out; expected {n * p:.0f} +- {4 * sigma:.0f}"
    assert held == [t for t in everything if t in set(held)], "the holdout keeps input order"

    m = json.load(open(os.path.join(outs[0], "manifest.json")))
    assert m["holdout"]["documents"] == len(held) and m["settings"]["holdout"] == p
    assert m["totals"]["documents"] == len(main)
    assert check(outs[0]).ok, "packer stats OUT checks both builds and finds nothing extra"
    ds = PackedDataset(os.path.join(outs[0], "holdout"))
    assert len(ds) == m["holdout"]["rows"]


def test_holdout_damage_is_reported_by_stats(corpus, tmp_path):
    out = str(tmp_path / "out")
    build([corpus], out, seq_len=128, workers=1, holdout=0.2)
    os.remove(os.path.join(out, "holdout", "shards", "000000.arrow"))
    rep = check(out)
    assert any(p.path.startswith("holdout/") and p.kind == "missing" for p in rep.problems)


def test_limit_takes_the_first_n_documents_in_input_order(corpus, tmp_path):
    full = str(tmp_path / "full")
    build([corpus], full, seq_len=128, workers=1, unit_mb=0.02)
    everything = texts_of(full)
    for n in (1, 999, 1000, 1001, 2345):
        outs = []
        for w in (1, 2):
            out = str(tmp_path / f"lim{n}-{w}")
            build([corpus], out, seq_len=128, workers=w, unit_mb=0.02, limit=n)
            outs.append(out)
        assert tree(outs[0]) == tree(outs[1])
        assert texts_of(outs[0]) == everything[:n]
        m = json.load(open(os.path.join(outs[0], "manifest.json")))
        assert m["settings"]["limit"] == n and m["totals"]["skipped"] == {}


def test_limit_counts_only_the_records_it_read(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(jl({"text": "a"}, {"x": 1}, {"text": "b"}, {"x": 2}, {"text": "c"}))
    out = str(tmp_path / "out")
    build([str(p)], out, seq_len=16, workers=1, limit=2)
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert texts_of(out) == ["a", "b"] and m["totals"]["skipped"] == {"missing_field": 1}


def test_dry_run_writes_nothing(corpus, tmp_path):
    out = str(tmp_path / "out")
    res = build([corpus], out, seq_len=128, unit_mb=0.02, dry_run=True, limit=10)
    assert not os.path.exists(out)
    plan = res.plan
    assert [f["path"] for f in plan["files"]] == [os.path.join(corpus, f"part{i}.jsonl") for i in range(3)]
    assert plan["formats"]["jsonl"]["files"] == 3 and plan["settings"]["limit"] == 10
    assert plan["units"] and plan["out_state"] == "would be created"
    # The settings it prints are the ones a real build records.
    build([corpus], out, seq_len=128, unit_mb=0.02, limit=10, workers=1)
    assert json.load(open(os.path.join(out, "build.json")))["settings"] == plan["settings"]
    again = build([corpus], out, seq_len=128, unit_mb=0.02, dry_run=True, limit=10)
    assert "would stop" in again.plan["out_state"] and "--resume" in again.plan["out_state"]


def test_summary_json_is_what_the_summary_prints(corpus, tmp_path, monkeypatch):
    import tqdm
    from click.testing import CliRunner

    from packer.cli import main

    # In-process, the progress bar would leave tqdm's monitor thread running, and every later build in
    # this test process would then start its workers from a forkserver (see packer.pipeline.engines.local.make_pool),
    # one that keeps the environment of the moment it started (the S3 tests set an endpoint after it).
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)

    out, s = str(tmp_path / "out"), str(tmp_path / "s.json")
    r = CliRunner().invoke(main, ["build", corpus, out, "--seq-len", "128", "--workers", "1", "--holdout", "0.05",
                                  "--summary-json", s])
    assert r.exit_code == 0, r.output
    doc = json.load(open(s))
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert doc["ok"] is True and doc["totals"] == m["totals"] and doc["holdout"] == m["holdout"]
    assert f"documents       {doc['totals']['documents']:,}" in r.output
    assert "1 unit run" in r.output  # singular


def test_the_progress_bar_starts_no_thread_so_workers_are_forked(corpus, tmp_path, monkeypatch):
    """A second thread at pool start sends the local engine to a forkserver, whose workers parse the
    tokenizer again (2x slower for Llama 3 at 2 workers): the bar must not start tqdm's monitor."""
    import importlib
    import threading

    import tqdm
    from click.testing import CliRunner

    from packer.cli import main

    local = importlib.import_module("packer.pipeline.engines.local")
    seen = []
    real = local.make_pool

    def make_pool(*args):
        seen.append({t.name for t in threading.enumerate()})
        return real(*args)

    monkeypatch.setattr(local, "make_pool", make_pool)
    before = {t.name for t in threading.enumerate()}
    r = CliRunner().invoke(main, ["build", corpus, str(tmp_path / "out"), "--seq-len", "128", "--workers", "2",
                                  "--unit-mb", "0.02"])
    assert r.exit_code == 0, r.output
    assert "build:" in r.output or "built " in r.output  # the bar and summary ran (not quiet)
    assert seen and seen[0] <= before, seen[0] - before  # no thread of the CLI's own (tqdm_monitor was one)
    assert tqdm.tqdm.monitor_interval == 10  # tqdm's own setting is the caller's again


def test_api_takes_the_cli_names_and_a_config_with_one_path(corpus, tmp_path):
    res = build(BuildConfig(inputs=corpus, out=str(tmp_path / "a")))  # a str, not iterated by character
    assert res.manifest["totals"]["documents"] == 3100
    res = build(corpus, str(tmp_path / "b"), seq_len=128, unit_mb=1, no_eos=False, holdout=0.0, limit=5)
    assert res.manifest["totals"]["documents"] == 5


@pytest.mark.parametrize("opts, match", [
    (dict(resume=True, overwrite=True), "contradict"),
    (dict(workers=-1), "--workers"),
    (dict(eos_token="<|endoftext|>"), "--eos-token needs --tokenizer"),
    (dict(eos_token="x", no_eos=True, tokenizer="t.json"), "contradict"),
    (dict(limit=0), "--limit"),
    (dict(holdout=1.0), "--holdout"),
    (dict(holdout=-0.1), "--holdout"),
    (dict(dry_run=True, overwrite=True), "dry_run=True"),
    (dict(text_field="a..b"), "--text-field"),
])
def test_contradictions_are_refused_in_one_line(opts, match):
    with pytest.raises(PackerError, match=match) as e:
        BuildConfig.of(["in"], "out", **opts)
    assert "\n" not in str(e.value)


def test_holdout_build_resumes_to_the_same_bytes(corpus, tmp_path):
    out = str(tmp_path / "out")
    build([corpus], out, seq_len=128, workers=1, unit_mb=0.02, holdout=0.1)
    before = tree(out)
    units = sorted(k for k in before if k.startswith("units/"))
    assert len(units) > 2
    # As a kill leaves it: no manifests, the last unit unfinished in the main build (its holdout half may exist).
    for rel in ("manifest.json", "holdout/manifest.json", units[-1], "shards/" + os.path.basename(units[-1])[:-5] + ".arrow"):
        os.remove(os.path.join(out, rel))
    res = build([corpus], out, seq_len=128, workers=2, unit_mb=0.02, holdout=0.1, resume=True)
    assert res.units_run == 1 and tree(out) == before
    with pytest.raises(PackerError, match="holdout"):
        build([corpus], out, seq_len=128, workers=1, unit_mb=0.02, holdout=0.2, resume=True)


def test_show_header_says_row_of_once(tmp_path):
    from packer.inspect.show import read_row, render

    p = tmp_path / "a.jsonl"
    p.write_bytes(jl(*({"text": "x" * 40} for _ in range(4))))
    out = str(tmp_path / "out")
    build([str(p)], out, seq_len=64, workers=1)
    head = render(read_row(out, 1), None, ids=True)[0]
    assert head.startswith("row 1 of 4 in shards/000000.arrow; 1 piece, 41 tokens"), head
    assert head.count("row 1 of") == 1


def test_default_max_record_is_not_recorded(tmp_path):
    _, m = run(tmp_path, {"a.jsonl": jl({"text": "one"})})
    assert "max_record_bytes" not in m["settings"]  # a build without the option has the bytes it always had


# 11. Bounds and exit codes.
def test_seq_len_that_cannot_be_allocated_is_refused_in_one_line(tmp_path, corpus):
    for n in ("100000000000", str(10**15)):
        r = cli("build", corpus, str(tmp_path / "out"), "--seq-len", n, timeout=60)
        assert r.returncode == 2
        one_line(r, "--seq-len", "too large")



def test_python_api_errors_name_the_keyword_the_caller_passed_and_the_cli_keeps_its_flags(tmp_path):
    """Issue 55.8: build(resume=True) is told "resume=True", not "--resume"; the CLI's lines say the flags."""
    src = tmp_path / "a.jsonl"
    src.write_bytes(jl({"text": "one"}, {"text": "two"}))
    out = str(tmp_path / "o")
    with pytest.raises(PackerError) as e:
        build([str(src)], out, resume=True, overwrite=True)
    assert str(e.value).startswith("resume=True and overwrite=True contradict each other") and "--" not in str(e.value)
    with pytest.raises(PackerError, match=r"dry_run=True writes nothing: it takes no resume=True or overwrite=True"):
        BuildConfig.of([str(src)], out, dry_run=True, resume=True)
    build([str(src)], out, seq_len=64, workers=1, quiet=True)
    with pytest.raises(PackerError, match=r"is not empty: pass resume=True to continue a build there, or overwrite=True"):
        build([str(src)], out, seq_len=64, workers=1)
    with pytest.raises(PackerError, match="--seq-len must be at least 2"):  # an option with a value: as validation names it
        build([str(src)], out, seq_len=1)
    r = cli("build", str(src), out, "--seq-len", "64", "-q")
    one_line(r, "is not empty: pass --resume to continue a build there, or --overwrite to replace it")
    r = cli("build", str(src), out, "--resume", "--overwrite")
    one_line(r, "--resume and --overwrite contradict each other")
