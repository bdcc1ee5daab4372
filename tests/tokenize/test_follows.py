"""A model folder is encoded as transformers builds it (follows.py), with the config's special tokens.

Reference: ``transformers.AutoTokenizer.from_pretrained(folder)`` on folders built here
(tokenizer.json + tokenizer_config.json); the real folders in ../shared/data where present.
"""

from __future__ import annotations

import json
from dataclasses import replace
import os
import sys

import pytest

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from packer.errors import PackerError
from packer.tokenize import Encoder, choose_backend, resolve_tokenizer
from packer.tokenize import follows as F

from tests.conftest import REAL_TOKENIZERS, one_check_sample

TEXTS = ["  two", "two", " two  two", "<s> two", "a</s>  two", "tw<mask>o <think>two</think>", "\ttwo\n  tw", ""]


def llama2_like(folder, **config) -> str:
    """A SentencePiece-style BPE as Llama-2 ships it (Prepend + Replace normalizer, byte fallback, a <s> template),
    named LlamaTokenizer by its tokenizer_config.json, with a plain <mask> the config names and a plain <think>."""
    os.makedirs(folder, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(256):
        vocab[f"<0x{i:02X}>"] = len(vocab)
    for t in ["▁", "t", "w", "o", "▁t", "tw", "▁tw", "two", "▁two", "▁▁", "a", "<", ">", "/"]:
        vocab.setdefault(t, len(vocab))
    merges = [("▁", "t"), ("t", "w"), ("▁t", "w"), ("tw", "o"), ("▁tw", "o"), ("▁", "▁")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<mask>", "<think>", "</think>")])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.save(os.path.join(folder, "tokenizer.json"))
    cfg = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
           "mask_token": "<mask>", **config}
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    return str(folder)


def ids(info, texts=TEXTS):
    return [a.tolist() for a in Encoder(choose_backend(info, "auto")).encode_batch(texts)]


def transformers_ids(folder, texts=TEXTS, eos=2, **kw):
    tf = pytest.importorskip("transformers")
    hf = tf.AutoTokenizer.from_pretrained(folder, **kw)
    return [i + [eos] for i in hf(texts)["input_ids"]]


@pytest.mark.parametrize("config", [{}, {"legacy": True}, {"add_prefix_space": False}])
def test_llama2_folder_follows_transformers_and_says_so(tmp_path, config):
    folder = llama2_like(tmp_path / "llama2", **config)
    info = resolve_tokenizer(folder)
    assert ids(info) == transformers_ids(folder)
    said = [n for n in info.notes if "differ in" in n]
    assert len(said) == 1 and "pre-tokenizer" in said[0] and "packer follows transformers" in said[0]
    assert "tokenizer_follows" not in info.manifest()


def test_follows_file_runs_the_file_and_is_recorded(tmp_path):
    folder = llama2_like(tmp_path / "llama2")
    info = resolve_tokenizer(folder, follows="file")
    ref = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    assert ids(info) == [e.ids + [2] for e in ref.encode_batch(TEXTS)]
    assert ids(info) != transformers_ids(folder)  # "  two" is where they part
    assert any("packer follows tokenizer.json" in n for n in info.notes)
    assert info.manifest()["tokenizer_follows"] == "file"
    assert resolve_tokenizer(folder).fingerprint != info.fingerprint
    with pytest.raises(PackerError, match="unknown --tokenizer-follows 'both'"):
        resolve_tokenizer(folder, follows="both")


@pytest.mark.parametrize("config", [{}, {"legacy": True}, {"add_prefix_space": False},
                                    {"tokenizer_class": "PreTrainedTokenizerFast", "additional_special_tokens": ["<think>"]}])
def test_the_recorded_rule_is_what_transformers_builds(tmp_path, monkeypatch, config):
    """Without transformers, the recorded rule gives the very tokenizer transformers builds."""
    pytest.importorskip("transformers")
    folder = llama2_like(tmp_path / "m", **config)
    with_tf = resolve_tokenizer(folder)
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now fails
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    without = resolve_tokenizer(folder)
    assert without.json == with_tf.json and without.fingerprint == with_tf.fingerprint
    assert any("transformers' rule for" in n for n in without.notes)


def test_config_special_tokens_split_and_are_counted_as_transformers_does(tmp_path):
    folder = llama2_like(tmp_path / "m", tokenizer_class="PreTrainedTokenizerFast")
    with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
        json.dump({"additional_special_tokens": ["</think>"]}, f)
    texts = ["a<mask>b", "x</think>", "<think>y"]
    split = resolve_tokenizer(folder, split_special=True)
    assert ids(split, texts) == transformers_ids(folder, texts, split_special_tokens=True)
    whole = resolve_tokenizer(folder)
    assert ids(whole, texts) == transformers_ids(folder, texts)
    enc = Encoder(choose_backend(whole, "auto"))
    flat, lengths = enc.encode_flat(texts)
    # <mask> is the config's mask_token; </think> is named besides, and plain in tokenizer.json: transformers
    # keeps it plain (one id, never split), and packer reports it with the plain added tokens
    assert enc.specials_found(texts, flat, lengths) == [(0, "<mask>")]
    assert enc.added_found(texts, flat, lengths) == [(1, "</think>"), (2, "<think>")]
    flat, lengths = Encoder(choose_backend(split, "auto")).encode_flat(texts)
    assert Encoder(split).added_found(texts, flat, lengths) == [(1, "</think>"), (2, "<think>")]


def test_a_folder_transformers_cannot_load_is_one_note_and_the_file(tmp_path):
    pytest.importorskip("transformers")
    folder = llama2_like(tmp_path / "m")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        f.write("{not json")
    info = resolve_tokenizer(folder)
    assert any("transformers cannot load it" in n and "follows tokenizer.json" in n for n in info.notes)
    ref = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    assert ids(info) == [e.ids + [2] for e in ref.encode_batch(TEXTS)]


def test_the_resolve_record_is_keyed_on_the_config_files(tmp_path):
    folder = llama2_like(tmp_path / "m", tokenizer_class="PreTrainedTokenizerFast")
    first = resolve_tokenizer(folder)
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    cfg["mask_token"] = "<think>"  # a named special token now: special to transformers
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    again = resolve_tokenizer(folder)
    assert "<think>" in dict(again.specials).values() and "<think>" in dict(first.plain_added).values()


def test_a_lone_tokenizer_json_is_run_as_it_is(tmp_path):
    folder = llama2_like(tmp_path / "m")
    path = os.path.join(folder, "tokenizer.json")
    info = resolve_tokenizer(path)
    assert not info.notes and F.config_paths(path) == []
    assert ids(info) == [e.ids + [2] for e in Tokenizer.from_file(path).encode_batch(TEXTS)]


REAL = ["llama3", "mistral-v3", "qwen3", "gemma3", "llama2", "deepseek_v3"]
PRESENT = [n for n in REAL if REAL_TOKENIZERS.get(n) and os.path.isdir(REAL_TOKENIZERS[n])]
# Issue 54: the default run takes 2 of the present folders (a seeded rotation, conftest.rotation); the rest
# are marked full. The small folders above check the note naming each part; tests/tokenize/test_real_families.py
# and test_follows_rule.py load the other families.
in_full_sweep = one_check_sample(PRESENT, "test_real_folders_agree_with_transformers", "follows")  # (tests/conftest.py marks them full)


@pytest.mark.parametrize("name", REAL)
def test_real_folders_agree_with_transformers(name):
    """The real folders: transformers' ids, and a note where the file's parts are not what transformers builds
    (Llama 2's LlamaTokenizer rebuilds its pre-tokenizer), naming those parts. (Default run: 2 of the present
    folders, SAMPLE_RUN; all of them under -m full.)"""
    path = REAL_TOKENIZERS.get(name)
    if path is None or not os.path.isdir(path):
        pytest.skip(f"real {name} folder not present")
    tf = pytest.importorskip("transformers")
    info = resolve_tokenizer(path)
    hf = tf.AutoTokenizer.from_pretrained(path)
    file_parts = json.loads(Tokenizer.from_file(os.path.join(path, "tokenizer.json")).to_str())
    tf_parts = json.loads(hf.backend_tokenizer.to_str())
    differ = {label for key, label in F._PARTS if file_parts[key] != tf_parts[key]}
    if [(t["id"], t["content"], t["special"]) for t in file_parts["added_tokens"]] != [
            (t["id"], t["content"], t["special"]) for t in tf_parts["added_tokens"]]:
        differ.add("added/special tokens")  # (Gemma 3: the config's <mask> is special to transformers)
    said = [n for n in info.notes if "differ in" in n]
    named = set(said[0].split("differ in the ")[1].split(";")[0].split(", ")) if said else set()
    # each part named differs; each part that decides the ids (not the post-processor, whose no-op forms
    # packer takes as none) and differs is named; Llama 3 and Mistral v3 are their files: nothing said
    assert named <= differ and differ - {"post-processor"} <= named, (differ, said)
    assert not said or name not in ("llama3", "mistral-v3")
    texts = TEXTS + ["<|begin_of_text|>hi  there", "[INST] x [/INST]", " leading", "e\u0301 \u00e9"]
    got = ids(info, texts)
    assert got == [i if i[-1:] == [info.eos_id] else i + [info.eos_id] for i in hf(texts)["input_ids"]]


def qwen2_folder(folder, **config) -> str:
    """A byte-level BPE whose tokenizer.json splits digits in threes (not Qwen2's one by one), named Qwen2Tokenizer."""
    from tests.tokenize.backend.test_normalize import QWEN_PATTERN, qwen_like

    d = json.loads(qwen_like("NFC"))
    d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN_PATTERN.replace(r"\p{N}|", r"\p{N}{1,3}|")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(d, f)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|endoftext|>", **config}, f)
    return str(folder)


@pytest.mark.parametrize("config", [{}, {"add_prefix_space": True}])
def test_qwen2_folder_follows_transformers_on_the_fast_backend(tmp_path, monkeypatch, config):
    pytest.importorskip("tiktoken")
    folder = qwen2_folder(tmp_path / "q", **config)
    texts = ["12345 a1b22c333", " x 2024-01-01", "e\u0301 caf\u00e9 1000000"]
    info = choose_backend(resolve_tokenizer(folder), "auto", lambda: texts)
    if not config:  # transformers' tokenizer is still one the fast backend runs (a prefix space it refuses)
        assert info.backend != "hf", info.backend_reason
    eos = info.eos_id
    assert [a.tolist() for a in Encoder(info).encode_batch(texts)] == transformers_ids(folder, texts, eos)
    assert any("differ in the pre-tokenizer" in n for n in info.notes)
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    assert resolve_tokenizer(folder).json == info.json  # the recorded rule builds the same tokenizer


def test_a_folder_that_agrees_with_transformers_keeps_its_fingerprint(tmp_path):
    """No post-processor in the file, a template that adds nothing in transformers: the same ids, nothing said."""
    folder = qwen2_folder(tmp_path / "q", tokenizer_class="PreTrainedTokenizerFast")
    info = resolve_tokenizer(folder)
    assert info.fingerprint == resolve_tokenizer(os.path.join(folder, "tokenizer.json")).fingerprint
    assert not [n for n in info.notes if "differ" in n]


def test_a_folder_resolved_before_is_read_back_without_transformers(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    folder = llama2_like(tmp_path / "m")
    first = resolve_tokenizer(folder)
    monkeypatch.setattr(F, "transformers_view", lambda *a: pytest.fail("transformers consulted again"))
    again = resolve_tokenizer(folder)
    assert again == replace(first, name=again.name) and again.notes == first.notes


def test_a_build_counts_plain_added_tokens_and_records_follows_only_when_asked(tmp_path):
    from click.testing import CliRunner

    from packer import build
    from packer.cli import main
    from packer.inspect.stats import summary_lines

    from tests.conftest import write_jsonl

    folder = llama2_like(tmp_path / "m", tokenizer_class="PreTrainedTokenizerFast")
    src = write_jsonl(tmp_path / "in.jsonl", ["plain two", "a <think>two</think>", "x<mask>y", "<think>"])
    res = build([src], str(tmp_path / "o"), seq_len=64, tokenizer=folder, workers=1, quiet=True)
    t = res.manifest["totals"]
    assert t["special_in_text"] == {"<mask>": 1} and t["special_in_text_examples"] == {"<mask>": [f"{src}:3"]}
    assert t["added_in_text"] == {"</think>": 1, "<think>": 2}
    assert t["added_in_text_examples"]["<think>"] == [f"{src}:2", f"{src}:4"]
    # Issue 53.8: documents, each once ("a <think>two</think>" holds two strings), not the per-token sum (3)
    assert t["added_in_text_documents"] == 2 and t["special_in_text_documents"] == 1
    assert any(line.startswith("added tokens    2 document(s)") for line in summary_lines(res.manifest))
    assert "tokenizer_follows" not in res.manifest["settings"] and "tokenizer_follows" not in res.manifest["tokenizer"]
    plain = write_jsonl(tmp_path / "plain.jsonl", ["plain two", "two"])
    t = build([plain], str(tmp_path / "p"), seq_len=64, tokenizer=folder, workers=1, quiet=True).manifest["totals"]
    assert "added_in_text" not in t and "special_in_text" not in t  # a record without any keeps its bytes
    r = CliRunner().invoke(main, ["build", plain, str(tmp_path / "f"), "--tokenizer", folder, "--seq-len", "64",
                                  "--workers", "1", "--tokenizer-follows", "file"])
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "f" / "manifest.json").read_text())
    assert m["settings"]["tokenizer_follows"] == "file" and m["tokenizer"]["tokenizer_follows"] == "file"
    r = CliRunner().invoke(main, ["build", plain, str(tmp_path / "g"), "--tokenizer", folder, "--tokenizer-follows", "x"])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_the_disagreement_is_said_once_at_the_start_and_recorded_at_the_end(tmp_path):
    """The note comes before any unit runs (nothing is in OUT yet when it is said), once on the CLI's stderr
    before the summary, and the summary JSON and the manifest record it as before."""
    from click.testing import CliRunner

    from packer import build
    from packer.cli import main

    from tests.conftest import write_jsonl

    folder = llama2_like(tmp_path / "m")
    src = write_jsonl(tmp_path / "in.jsonl", ["  two", "two"])
    out, said = tmp_path / "o", []
    res = build([src], str(out), seq_len=64, tokenizer=folder, workers=1, quiet=True,
                on_note=lambda n: said.append((n, out.exists() and sorted(os.listdir(out)))))
    assert len(said) == 1 and "pre-tokenizer" in said[0][0] and said[0][1] is False
    assert said[0][0] in res.notes and said[0][0] in res.manifest["tokenizer"]["notes"]
    r = CliRunner().invoke(main, ["build", src, str(tmp_path / "c"), "--tokenizer", folder, "--seq-len", "64",
                                  "--workers", "1", "--summary-json", str(tmp_path / "s.json")])
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    at = [i for i, line in enumerate(lines) if "tokenizer.json and transformers" in line]
    built = next(i for i, line in enumerate(lines) if line.startswith("built "))
    assert len(at) == 1 and lines[at[0]] == f"note: {said[0][0]}" and at[0] < built
    assert json.loads((tmp_path / "s.json").read_text())["notes"] == res.notes
    assert not CliRunner().invoke(main, ["build", src, str(tmp_path / "q"), "--tokenizer", folder, "-q"]).stderr


def _parts_parsed_whole(a, b) -> list[str]:
    """differences as it was: both JSONs parsed whole."""
    da, db = json.loads(a.to_str()), json.loads(b.to_str())
    for d in (da, db):
        pp = d.get("post_processor")
        d["post_processor"] = None if pp == F._NOOP_TEMPLATE or (pp or {}).get("type") == "ByteLevel" else pp
    out = [name for key, name in F._PARTS if da.get(key) != db.get(key)]
    added = [(t["id"], t["content"], t.get("special")) for t in da.get("added_tokens") or []]
    if added != [(t["id"], t["content"], t.get("special")) for t in db.get("added_tokens") or []]:
        out.append("added/special tokens")
    return out


def test_differences_without_the_whole_parse_finds_what_the_whole_parse_finds(tmp_path):
    """The same text from the model on is the same model: the parts before it decide; a model that differs
    by one merge is found as the whole parse finds it."""
    base = Tokenizer.from_file(os.path.join(llama2_like(tmp_path / "a"), "tokenizer.json"))
    variants = {"same": Tokenizer.from_str(base.to_str())}
    v = Tokenizer.from_str(base.to_str())
    v.normalizer = normalizers.NFC()
    variants["normalizer"] = v
    v = Tokenizer.from_str(base.to_str())
    v.post_processor = None
    variants["post-processor"] = v
    v = Tokenizer.from_str(base.to_str())
    v.add_special_tokens([AddedToken("<x>", special=True)])
    variants["added"] = v
    d = json.loads(base.to_str())
    d["model"]["merges"] = d["model"]["merges"][:-1]
    variants["model"] = Tokenizer.from_str(json.dumps(d))
    v = Tokenizer.from_str(json.dumps(d))
    v.pre_tokenizer = pre_tokenizers.Whitespace()
    variants["model and pre-tokenizer"] = v
    for name, v in variants.items():
        assert F.differences(base, v) == _parts_parsed_whole(base, v), name
        assert F.differences(v, base) == _parts_parsed_whole(v, base), name
    assert F.differences(base, variants["same"]) == []
    assert "model" in F.differences(base, variants["model"])
    text = base.to_str()
    got = F._before_model(text)
    assert got is not None and "model" not in got[0] and json.loads(got[1][:-1]) == json.loads(text)["model"]
    assert F._before_model('{"a": 1}') is None and F._before_model("[1]") is None
    assert F._before_model('{"a": 1, "a": 2, "model": {}}') is None  # a key twice: parsed whole
