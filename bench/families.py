"""Small tokenizers of each model family, built at run time with the ``tokenizers`` library (no downloads).

Each is trained in about a second on the texts given (sample_data by
default) and saved as a tokenizer.json, as its family's real file is laid
out: the same model type, normalizer, pre-tokenizer, post-processor template
and special tokens. The tests use them so any clone runs the whole suite;
bench/family_exact.py uses them next to the real files in ../shared/data.

    families.build_all(texts, folder) -> {name: path}
"""

from __future__ import annotations

import json
import os

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _bpe_bytelevel(texts, vocab: int, specials: list[str], split: str | None, nfc: bool = False):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if split is None:  # GPT-2: ByteLevel's own regex
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:  # Llama 3 / Qwen: a Split regex, then bytes without a second split
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def gpt2_like(texts):
    """Byte-level BPE, the GPT-2 pattern, <|endoftext|>, no template; truncation on (as the real file has)."""
    from tokenizers import processors

    tok = _bpe_bytelevel(texts, 1200, ["<|endoftext|>"], None)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.enable_truncation(50)
    return tok


def llama3_like(texts):
    """Byte-level BPE with the Llama-3 Split regex and a <|begin_of_text|> $A template."""
    from tokenizers import processors

    tok = _bpe_bytelevel(texts, 1200, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], LLAMA3_SPLIT)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def qwen_like(texts):
    """Byte-level BPE behind an NFC normalizer (Qwen-class), <|endoftext|>, no BOS."""
    return _bpe_bytelevel(texts, 1200, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], LLAMA3_SPLIT, nfc=True)


def llama2_like(texts):
    """SentencePiece-style BPE (Metaspace, byte fallback, <0xXX> byte tokens) with a <s> $A template."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    base = Tokenizer(models.BPE())  # trained on words (fast); the real layout then runs without a pre-tokenizer
    base.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    base.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=900, show_progress=False))
    trained = json.loads(base.to_str())["model"]
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {t: i for i, t in enumerate(specials + [f"<0x{b:02X}>" for b in range(256)])}
    for t, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(t, len(vocab))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(specials)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


def unigram_nfkc(texts):
    """Unigram (T5-style) behind NFKC, Metaspace, with a $A </s> template."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=800, special_tokens=["<pad>", "</s>", "<unk>"],
                                                           unk_token="<unk>", show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return tok


def bert_wordpiece(texts):
    """WordPiece behind the BERT normalizer, with a [CLS] $A [SEP] template."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=900, special_tokens=specials, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def wordlevel_big(texts, size: int = 70_000):
    """WordLevel over ``size`` > 65,536 ids (uint32 shards), EOS the last id."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0}
    for t in texts:
        for w in t.split():
            if len(vocab) < size - 1:
                vocab.setdefault(w, len(vocab))
    for i in range(len(vocab), size - 1):
        vocab[f"filler{i}"] = i
    vocab["<|endoftext|>"] = size - 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


FAMILIES = {
    "gpt2-like": gpt2_like,
    "llama3-like": llama3_like,
    "qwen-like": qwen_like,
    "llama2-like": llama2_like,
    "unigram-nfkc": unigram_nfkc,
    "bert-wordpiece": bert_wordpiece,
    "wordlevel-70k": wordlevel_big,
}


def sample_texts(limit: int = 600) -> list[str]:
    """Texts of sample_data/corpus.jsonl (the repo's own), to train on."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    with open(os.path.join(here, "sample_data", "corpus.jsonl"), "rb") as f:
        for line in f:
            try:
                t = json.loads(line).get("text")
            except (ValueError, AttributeError):
                continue
            if isinstance(t, str) and t:
                out.append(t)
            if len(out) >= limit:
                break
    return out


def build_all(folder: str, texts: list[str] | None = None, names=None) -> dict[str, str]:
    """Train each family (``names``: a subset) and save ``folder/NAME/tokenizer.json``; {name: folder path}."""
    texts = texts if texts is not None else sample_texts()
    out = {}
    for name in names or FAMILIES:
        d = os.path.join(folder, name)
        os.makedirs(d, exist_ok=True)
        FAMILIES[name](texts).save(os.path.join(d, "tokenizer.json"))
        out[name] = d
    return out
