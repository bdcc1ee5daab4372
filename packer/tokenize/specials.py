"""What goes around each document's ids, and special-token strings met inside the text.

**Around the text.** A model family expects each document encoded as
transformers' ``tokenizer(text)`` gives it: the tokenizer.json post-processor's
single-sequence template (Llama-2/Mistral/Gemma ``<s> $A`` / ``<bos> $A``, BERT
``[CLS] $A [SEP]``, RoBERTa ``<s> $A </s>``); none for no post-processor.
packer then appends the end-of-document id unless the template already ends
with it. ``template`` reads the template by running the tokenizer itself (so
every post-processor type is covered) and returns the ids before and after.
A model folder's tokenizer_config.json ``add_bos_token`` / ``add_eos_token``
are not applied: transformers 5 drops them whenever a tokenizer.json is there
(``PreTrainedTokenizerBase._from_pretrained``), so its template is the rule;
``--bos TOKEN`` adds one where a model wants it and the template lacks it.

**Inside the text.** HF cuts a special token's literal string (``<s>``,
``[MASK]``, ``<|endoftext|>``) out of ordinary text and gives its special id,
``add_special_tokens=False`` or not. ``found_in`` names the documents where that
happened, so the build counts them; ``--split-special-tokens`` (HF's
``encode_special_tokens``) encodes such strings as plain text instead.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import PackerError


def template(tok, spec: str) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """(ids before the text, ids after the text, where the rule came from) for ``tokenizer(text)``.

    ``tok``: the loaded ``tokenizers.Tokenizer`` (truncation off); ``spec``: what
    ``--tokenizer`` named, for messages.
    """
    if tok.post_processor is None:
        return (), (), "no template in the tokenizer"
    plain = tok.encode("a", add_special_tokens=False)
    full = tok.encode("a", add_special_tokens=True)
    mask = full.special_tokens_mask
    i = 0
    while i < len(mask) and mask[i]:
        i += 1
    j = len(mask)
    while j > i and mask[j - 1]:
        j -= 1
    pre, mid, post = full.ids[:i], full.ids[i:j], full.ids[j:]
    if mid != plain.ids:
        raise PackerError(f"tokenizer {spec}: its post-processor changes the text's own ids "
                          f"({plain.ids} -> {full.ids} for 'a'), which packer cannot reproduce")
    return tuple(pre), tuple(post), "the tokenizer's template"


def around(tok, spec: str, eos_id: int | None, bos: bool, bos_token: str | None, vocab: dict | None = None):
    """(prefix ids, suffix ids, one line naming them) for the build.

    ``bos`` False drops the template's leading ids, ``bos_token`` replaces them;
    the suffix is the template's trailing ids then ``eos_id`` unless they end
    with it. ``eos_id`` None (--no-eos) means nothing after the text. ``vocab``:
    the tokenizer's vocabulary with added tokens, if at hand.
    """
    pre, post, src = template(tok, spec)
    vocab = vocab if vocab is not None else tok.get_vocab(with_added_tokens=True)  # 0.3 s for 128k tokens
    if bos_token is not None:
        if bos_token not in vocab:
            raise PackerError(f"--bos {bos_token!r} is not in the vocabulary of {spec}")
        pre, pre_src = (vocab[bos_token],), "--bos"
    elif not bos:
        pre, pre_src = (), "--no-bos"
    else:
        pre_src = src
    if eos_id is None:
        post, post_src = (), "--no-eos"
    elif post[-1:] == (eos_id,):
        post_src = src
    else:
        post, post_src = post + (eos_id,), ("" if not post else f"after {src}")
    return tuple(pre), tuple(post), describe_around(tok, pre, pre_src, post, post_src)


def describe_around(tok, pre, pre_src: str, post, post_src: str) -> str:
    """"bos <s> (1) from the tokenizer's template; eos </s> (2)": what each document gets, by string and id."""
    def names(ids):
        return " ".join(f"{tok.id_to_token(i)} ({i})" for i in ids)

    head = f"bos {names(pre)} from {pre_src}" if pre else f"no bos ({pre_src})" if pre_src.startswith("--") else "no bos"
    tail = f"eos {names(post)}" + (f" from {post_src}" if post_src else "") if post else "no eos (--no-eos)"
    return f"{head}; {tail}"


def special_ids(tok, tokenizer_json: str | None = None) -> dict[int, str]:
    """{id: string} of the special added tokens HF cuts out of text (the unknown token is not one: models emit it).
    ``tokenizer_json``: ``tok.to_str()`` where the caller has it already."""
    unk = unknown_token(tok, tokenizer_json)
    return {i: t.content for i, t in tok.get_added_tokens_decoder().items()
            if t.special and t.content and t.content != unk}


def plain_added_ids(tok) -> dict[int, str]:
    """{id: string} of the added tokens that are not special: HF cuts them out of text too (one id each),
    with or without ``encode_special_tokens``."""
    return {i: t.content for i, t in tok.get_added_tokens_decoder().items() if not t.special and t.content}


def unknown_token(tok, tokenizer_json: str | None = None) -> str | None:
    """The model's unknown token: ``unk_token`` for BPE, WordPiece and WordLevel; a Unigram model
    names it by id (``unk_id``) in tokenizer.json only, not as an attribute."""
    unk = getattr(tok.model, "unk_token", None)
    if unk is None and type(tok.model).__name__ == "Unigram":
        uid = json.loads(tokenizer_json or tok.to_str()).get("model", {}).get("unk_id")
        unk = tok.id_to_token(uid) if isinstance(uid, int) else None
    return unk


def found_in(texts: list[str], ids: np.ndarray, lengths: np.ndarray, pre: tuple[int, ...], post: tuple[int, ...],
             specials: dict[int, str]) -> list[tuple[int, str]]:
    """(document index, token string) for each special token whose string is in a document's text
    and whose id is in its text ids. ``ids``/``lengths``: ``Encoder.encode_flat``'s output, each
    document ``pre`` (ids) before its text and ``post`` after.

    The common case, none in any text, is one count: every document holds ``pre`` and ``post``, so a
    chunk whose count of special ids is what those give has none inside a text. (np.isin and the
    positions of every hit cost 1 ns a token, with GPT-2's EOS a hit in every document.)"""
    if not specials or not len(ids):
        return []
    wanted = np.fromiter(specials, dtype=ids.dtype, count=len(specials))
    if len(wanted) <= 4:  # a few ==, at memory speed
        hit = ids == wanted[0]
        for v in wanted[1:]:
            hit |= ids == v
    else:
        hit = np.isin(ids, wanted)
    around = sum(1 for v in (*pre, *post) if v in specials)
    if np.count_nonzero(hit) == around * len(lengths):
        return []
    n_pre, n_post = len(pre), len(post)
    where = np.flatnonzero(hit)
    ends = np.cumsum(lengths)
    docs = np.searchsorted(ends, where, side="right")
    starts = ends - lengths
    inside = (where >= starts[docs] + n_pre) & (where < ends[docs] - n_post)
    out: list[tuple[int, str]] = []
    # each (document, token string) looked at once: a text is searched once per token, not per hit
    # (a 1.8 MB text with a million hits of one id took minutes)
    for d, s in dict.fromkeys((d, specials[i]) for d, i in zip(docs[inside].tolist(), ids[where[inside]].tolist())):
        if s in texts[d]:
            out.append((d, s))
    return out
