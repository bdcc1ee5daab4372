"""The real tokenizer files, each family as its model ships it: a text build's ids per document are
``transformers.AutoTokenizer.from_pretrained(folder)(text)["input_ids"]`` then EOS, on every backend packer
runs it with (auto, hf, and tiktoken where it accepts the file), on real text, on every code point but the
surrogates, and on every added token's string in text (with and without --split-special-tokens). (auto and hf builds
writing byte-identical shards on each real folder: tests/tokenize/backend/test_fastokens_alone.py.)

The small faithful copies of these families are tests/tokenize/test_families.py and the backend tests; this
is the same checks on the real files: ../shared/data (GPT-2, Llama 3, Mistral v3) and the folders that
../shared/tools/fetch-tokenizers fetches (Qwen3, Gemma 3, Llama 2, DeepSeek V3; conftest.REAL_TOKENIZERS).
Each family skips when its file is absent. Each tokenizer is loaded once (the module fixture ``fam``: pytest
runs one family's tests together, then lets it go).

The default run samples the sweep (issue 54): each check runs on PER_CHECK of the families present, a seeded
rotation, so every present family is loaded and checked and every check runs (the code point sweep on one code
point in CODE_POINT_STEP); the other (family, check) pairs and the sweep's other code points are marked ``full`` (``pytest -m full``, PACKER_TEST_FULL=1, .ci/run with PACKER_CI_FULL=1; ``in_full_sweep``).
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest

from packer.errors import PackerError

from tests.conftest import REAL_TOKENIZERS, REPO, SAMPLE, one_in, read_documents, rotation, sampled_out, write_jsonl

pytest.importorskip("transformers")

FAMILIES = ("qwen3", "gemma3", "llama2", "deepseek_v3", "llama3", "gpt2", "mistral-v3", "minilm")  # minilm: WordPiece
ODD = ["code: print('<s>%s</s>' % x)\n[MASK] and <|endoftext|> on a web page <|begin_of_text|>.",
       "ｶﾀｶﾅ e\u0301 ﬁ ① Z̷a̸l̶g̵o", "  leading spaces\n\n\ttabs  ", "a", "", "日本語のテキスト。中文 한국어 👍🏽 👩‍👩‍👧‍👦",
       "don't I'M we'll 1234567 12.5 ١٢٣ ४५६", "x" * 5000, "\u00a0\u2003\u3000\u200b\r\n\r\n", "😀" * 30,
       "<think>a</think> <|im_start|>user <start_of_turn>model <｜begin▁of▁sentence｜> [INST] x [/INST]"]
STDLIB = ("textwrap", "difflib", "argparse", "json/decoder", "email/_header_value_parser", "unicodedata")


def real_texts() -> list[str]:
    """Real text, one document per file: the repo's docs and README, some Python standard library source,
    the repo's sample corpus (first 100 records), and hard strings. About 0.7 MB, fixed by the checkout.
    Not docs/benchmarks.md: our own tables of figures, half the docs' bytes and growing every stop."""
    paths = [os.path.join(REPO, "README.md")] + sorted(
        os.path.join(REPO, "docs", f) for f in os.listdir(os.path.join(REPO, "docs"))
        if f.endswith(".md") and f != "benchmarks.md")
    std = os.path.dirname(os.__file__)
    paths += [p for p in (os.path.join(std, m + ".py") for m in STDLIB) if os.path.exists(p)]
    out = [open(p, encoding="utf-8").read() for p in paths]
    with open(os.path.join(SAMPLE, "corpus.jsonl"), "rb") as f:  # (it holds bad records on purpose: left out)
        for line in f:
            try:
                text = json.loads(line)["text"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(text, str) and text and len(out) < len(paths) + 100:
                out.append(text)
    return out + ODD


def sweep(chunk: int = 1024, part: str = "all", seed: str = "") -> list[str]:
    """Every code point but the surrogates, ``chunk`` to a text, each after a letter, doubled, after a digit
    and before a space (bench/family_exact.py's sweep, in larger texts), then whitespace and digit runs,
    emoji sequences and stacked combining marks. ``part``: "sample", one code point in CODE_POINT_STEP from a
    start seeded by ``seed``, with the runs, emoji and marks; "rest", the other code points alone."""
    cps = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    if part != "all":
        cps = one_in(cps, CODE_POINT_STEP, seed, part)
    texts = ["".join(f"{c}a{c}{c} 7{c}\u3000" for c in cps[i:i + chunk]) for i in range(0, len(cps), chunk)]
    if part == "rest":
        return texts
    ws = [" ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\u200b"]
    return (texts
            + [a * n + "x" + b * m for a in ws for b in ws for n in (1, 2, 3, 17) for m in (1, 4)]
            + ["".join(chr(z + d) for d in range(10)) * 3 + " 1234567 12.5" for z in (0x30, 0x660, 0x966, 0xFF10)]
            + ["👩‍👩‍👧‍👦 🇫🇷 👍🏽 ❤️‍🔥 é ệ ﷽ 가각 日本語の文章 ༀ ำ", "a\u0301\u0302\u0303 e\u0308\u0304 " * 30])




class Family:
    """One real tokenizer: transformers' own (the reference) and packer's, resolved and checked once."""

    def __init__(self, name: str, path: str):
        import transformers as tf

        self.name, self.path = name, path
        self.tf = (tf.AutoTokenizer.from_pretrained(path) if os.path.isdir(path)
                   else tf.PreTrainedTokenizerFast(tokenizer_file=path))  # GPT-2: a lone tokenizer.json
        self.texts = real_texts()
        self._infos: dict = {}

    @functools.cached_property
    def options(self) -> dict:
        """What a user passes besides --tokenizer: nothing, or the config's eos_token where packer's default
        finds none (DeepSeek V3 today: test_the_default_eos_is_the_configs). Found once per family: each
        resolve of a 33 MB tokenizer.json (Gemma 3) reads and hashes it again."""
        try:
            from packer.tokenize import resolve_tokenizer

            resolve_tokenizer(self.path)
            return {}
        except PackerError as e:
            if "no end-of-document token" not in str(e):
                raise
            return {"eos_token": config_eos(self.path)}

    def info(self, backend: str, split: bool = False):
        """packer's TokenizerInfo with ``backend`` chosen (the auto check sampling real text); None where
        tiktoken refuses the file (as one PackerError, nothing built)."""
        from packer.tokenize import choose_backend, resolve_tokenizer

        key = (backend, split)
        if key not in self._infos:
            info = resolve_tokenizer(self.path, split_special=split, **self.options)
            try:
                self._infos[key] = choose_backend(info, backend, lambda: self.texts[:50])
            except PackerError as e:
                assert backend == "tiktoken" and "nothing was built" in str(e), e
                self._infos[key] = None
        return self._infos[key]

    def ids(self, backend: str, texts: list[str], split: bool = False) -> list[np.ndarray] | None:
        from packer.tokenize import Encoder

        info = self.info(backend, split)
        return None if info is None else Encoder(info).encode_batch(texts)

    def reference(self, texts: list[str], split: bool = False) -> list[list[int]]:
        """``tokenizer(text)["input_ids"]`` then the build's EOS, unless the template itself ends with it."""
        eos = self.info("hf", split).eos_id
        template = self.tf("", truncation=False, split_special_tokens=split)["input_ids"]
        tail = [eos] if template[-1:] != [eos] else []
        return [i + tail for i in self.tf(texts, truncation=False, split_special_tokens=split)["input_ids"]]


def config_eos(path: str) -> str | None:
    """The eos_token that the folder's tokenizer_config.json names (a string or an AddedToken record)."""
    cfg = os.path.join(path, "tokenizer_config.json")
    if not os.path.exists(cfg):
        return None
    eos = json.load(open(cfg, encoding="utf-8")).get("eos_token")
    return eos.get("content") if isinstance(eos, dict) else eos


PRESENT = [f for f in FAMILIES if REAL_TOKENIZERS.get(f) and os.path.exists(REAL_TOKENIZERS[f])]
# Each check: (test function, its split param or None).
CHECKS = (("test_real_text_is_transformers_then_eos", None), ("test_every_code_point_is_transformers_then_eos", None),
          ("test_added_token_strings_in_text", False), ("test_added_token_strings_in_text", True),
          ("test_flat_and_batch_views_agree", None), ("test_auto_and_hf_builds_write_identical_shards", None))
PER_CHECK = 2  # families each check takes in the default run
CODE_POINT_STEP = 8  # the default run's code point sweep takes one in 8 (DeepSeek V3's took 410 s whole, at load 18)
SAMPLE_RUN = rotation(PRESENT, CHECKS, PER_CHECK, "real-families")


def in_full_sweep(item) -> bool:
    """(tests/conftest.py marks these ``full``.) The (check, present family) pairs outside the default run's
    sample: PER_CHECK families per check, taken in turn from a seeded order (conftest.rotation). An absent
    family stays: it skips."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("fam") in PRESENT and params.get("part") == "rest":  # the code points the sample leaves out
        return True
    return sampled_out(item, "fam", PRESENT, SAMPLE_RUN, lambda it: (it.originalname, params.get("split")))


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request) -> Family:
    path = REAL_TOKENIZERS.get(request.param)
    if path is None or not os.path.exists(path):
        pytest.skip(f"real {request.param} tokenizer not present (../shared/data, or ../shared/tools/fetch-tokenizers)")
    return Family(request.param, path)


def first_difference(texts, got, want) -> str | None:
    """None when every document's ids are equal, else where the first one parts, for the failure line."""
    for d, (g, w) in enumerate(zip(got, want)):
        g = g.tolist()
        if g != w:
            k = next((j for j, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            return f"doc {d} {texts[d][:60]!r}...: at token {k} packer {g[k:k + 4]}, transformers {w[k:k + 4]}"
    return None if len(got) == len(want) else f"{len(got)} documents, transformers {len(want)}"


BACKENDS = ("auto", "hf", "tiktoken")


def check_all_backends(fam: Family, texts: list[str], split: bool = False) -> None:
    """Every backend's ids are transformers' on ``texts``. hf is not run again where auto chose it (the same
    encoder on the same tokenizer); tiktoken only where it accepts the file."""
    want = fam.reference(texts, split)
    auto = fam.info("auto", split)
    for backend in BACKENDS:
        if backend == "hf" and auto.backend == "hf":
            assert fam.info("hf", split).json == auto.json
            continue
        got = fam.ids(backend, texts, split)
        if got is not None:
            bad = first_difference(texts, got, want)
            assert bad is None, f"{fam.name} {backend} ({fam.info(backend, split).backend}): {bad}"


def test_real_text_is_transformers_then_eos(fam):
    check_all_backends(fam, fam.texts)
    if fam.name in ("gpt2", "llama3", "qwen3"):  # the byte-level BPE classes: a fast engine takes auto
        assert fam.info("auto").backend in ("tiktoken", "fastokens"), fam.info("auto").backend_reason


@pytest.mark.parametrize("part", ["sample", "rest"])
def test_every_code_point_is_transformers_then_eos(fam, part):
    """Every code point: in the default run one in CODE_POINT_STEP, from a start seeded by the family's name (the
    same each run; families start apart), with the runs, emoji and marks; the rest under the marker full."""
    check_all_backends(fam, sweep(part=part, seed=fam.name))


@pytest.mark.parametrize("split", [False, True], ids=["special", "split"])
def test_added_token_strings_in_text(fam, split):
    """Every added token's string alone, inside a word, doubled and after a space: one id each (special or
    plain added), or, with --split-special-tokens, the special ones as plain text, as transformers does."""
    tokens = [t.content for t in fam.tf.backend_tokenizer.get_added_tokens_decoder().values()]
    texts = tokens + [f"x{t}y {t}{t} {t}" for t in tokens] + ["".join(tokens[:64])]
    check_all_backends(fam, texts, split)


def test_flat_and_batch_views_agree(fam):
    from packer.tokenize import Encoder

    enc = Encoder(fam.info("auto"))
    ids, lengths = enc.encode_flat(fam.texts)
    starts = np.cumsum(lengths) - lengths
    assert [a.tolist() for a in enc.encode_batch(fam.texts)] == [ids[s:s + n].tolist() for s, n in zip(starts, lengths)]


def test_auto_and_hf_builds_write_identical_shards(fam, tmp_path):
    """A build of real text (one worker, small units: several shards) with each backend: the same shard bytes,
    and each document read back from them is transformers' ids then EOS."""
    from packer import build

    texts = [t for t in fam.texts if t]  # (an empty text is skipped as "empty", counted)
    src = write_jsonl(tmp_path / "real.jsonl", texts)
    sums, docs = {}, {}
    for backend in ("auto", "hf"):
        out = str(tmp_path / backend)
        m = build([src], out, seq_len=2048, tokenizer=fam.path, workers=1, quiet=True, unit_bytes=256 << 10,
                  tokenizer_backend=backend, **fam.options).manifest
        assert not m["totals"].get("skipped") and (backend == "auto" or m["tokenizer"]["backend"] == "hf")
        sums[backend] = [s["xxh3_128"] for s in m["shards"]]
        docs[backend] = read_documents(out)[0]
    assert len(sums["auto"]) > 1 and sums["auto"] == sums["hf"]
    bad = first_difference(texts, docs["auto"], fam.reference(texts))
    assert bad is None, bad


def test_the_default_eos_is_the_configs():
    """A folder whose tokenizer_config.json names its eos_token builds with it by default (issue 40, item 4)."""
    path = REAL_TOKENIZERS.get("deepseek_v3")
    if path is None:
        pytest.skip("real deepseek_v3 tokenizer not fetched")
    from packer.tokenize import resolve_tokenizer

    eos = config_eos(path)
    assert eos == "<｜end▁of▁sentence｜>"
    info = resolve_tokenizer(path)  # (0a283c5: "no end-of-document token I recognise", exit 2)
    from tokenizers import Tokenizer

    assert info.eos_id == Tokenizer.from_str(info.json).token_to_id(eos)
