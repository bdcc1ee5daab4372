"""Tokenizers: resolve what ``--tokenizer`` names, and encode batches of text.

``resolve_tokenizer`` runs once in the main process and returns a
``TokenizerInfo``: a picklable description (the tokenizer's JSON, its special
ids, a fingerprint) that worker processes turn into an ``Encoder``.

With no ``--tokenizer`` packer uses a built-in byte-level tokenizer (ids
0..255 are the UTF-8 bytes, 256 is end-of-document), so it runs offline with
no files at all.

The backend that encodes an HF tokenizer (``TokenizerInfo.backend``) is HF
``tokenizers`` or, where it gives the same ids, fastokens or tiktoken (several times faster):
``choose_backend`` decides, see packer/tokenize/backend/ and docs/tokenizers.md.
The ids, and so the shards, are the same whichever runs.
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field, replace

import numpy as np

from . import follows as follow
from . import info_cache, long_texts, view_child
from .sources import _load_hf, _local_file  # noqa: F401 (where a tokenizer.json comes from)
from . import specials as around_text
from ..errors import PackerError
from .backends import FORCED, check_backend
from .memo import remember, store

BYTES_NAME = "bytes"
BYTES_EOS = 256

# Special tokens tried, in order, as the end-of-document token.
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]")
# Keyed on all that decides their value (memo.remember), one entry each, never changed once stored:
_LOADED: dict = {}  # (fingerprint, split_special) -> its tokenizers.Tokenizer (encode_special_tokens set)
_CUT_RULE: dict = {}  # (fingerprint, split_special) -> long_texts.cut_rule's answer (None: long texts may be cut)


PAD_CANDIDATES = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>")


@dataclass(frozen=True)
class TokenizerInfo:
    """Everything a worker needs to encode, and the manifest needs to record."""

    name: str  # what the user passed, or "bytes"
    kind: str  # "bytes" | "hf"
    vocab_size: int  # ids are < vocab_size
    eos_id: int | None  # appended after every document; None with --no-eos
    pad_id: int  # fills the slots after a row's last piece
    fingerprint: str  # sha256 of the tokenizer definition as used
    json: str | None = None  # the HF tokenizer.json as used (truncation/padding off)
    notes: tuple[str, ...] = field(default=())  # changes packer made, said to the user
    backend: str = "hf"  # the backend that encodes: "bytes" | "hf" | "tiktoken" (same ids either way)
    backend_reason: str = ""  # one line: why that backend
    prefix: tuple[int, ...] = ()  # ids before every document's text (BOS, [CLS]): packer/tokenize/specials.py
    suffix: tuple[int, ...] | None = None  # ids after it; None = (eos_id,) or () with --no-eos
    added: str = ""  # one line naming prefix and suffix by string and id, for the summary and the manifest
    split_special: bool = False  # --split-special-tokens: special-token strings in text encoded as plain text
    specials: tuple[tuple[int, str], ...] = ()  # (id, string) of the special tokens HF cuts out of text
    plain_added: tuple[tuple[int, str], ...] = ()  # (id, string) of the added tokens that are not special (<think>)
    follows: str = "transformers"  # a model folder run as transformers builds it, or "file" (follows.py)

    @property
    def after(self) -> tuple[int, ...]:
        """The ids after every document's text ids (EOS included)."""
        if self.suffix is not None:
            return self.suffix
        return (self.eos_id,) if self.eos_id is not None else ()

    def adds_more_than_eos(self) -> bool:
        """True when documents get more than the end-of-document id (recorded then; see ``manifest``)."""
        return bool(self.prefix) or self.after != ((self.eos_id,) if self.eos_id is not None else ())

    def manifest(self) -> dict:
        # "added" and "split_special_tokens" only when they say something: a build that adds only
        # EOS (GPT-2, the byte tokenizer) keeps the manifest it always had, byte for byte.
        extra = {"added": self.added, "prefix_ids": list(self.prefix), "suffix_ids": list(self.after)} \
            if self.adds_more_than_eos() else {}
        if self.split_special:
            extra["split_special_tokens"] = True
        if self.follows != "transformers":  # recorded only when not the default: other manifests keep their bytes
            extra["tokenizer_follows"] = self.follows
        return {
            "name": self.name,
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "fingerprint": self.fingerprint,
            "notes": list(self.notes),
            "backend": self.backend,
            "backend_reason": self.backend_reason,
            **extra,
        }


def resolve_tokenizer(spec: str | None, eos: bool = True, eos_token: str | None = None, bos: bool = True,
                      bos_token: str | None = None, split_special: bool = False,
                      follows: str = "transformers", while_waiting=None) -> TokenizerInfo:
    """Turn ``--tokenizer`` into a ``TokenizerInfo``.

    ``spec`` is None (built-in bytes), a tokenizer.json, a folder holding one,
    or a hub name (used only if the hub or its local cache answers). What
    goes around each document (``bos``, ``bos_token``, the template): see
    packer/tokenize/specials.py. ``follows``: a model folder as transformers
    builds it ("transformers") or its tokenizer.json as it is ("file"): follows.py.
    ``while_waiting(info)``: called with tokenizer.json's own resolve while transformers' view of a
    model folder is still being built in a child (view_child.py), for work that needs a tokenizer
    (a build checks its backend then); not called where no child runs.
    """
    follow.check_follows(follows)
    if spec is None or spec == BYTES_NAME:
        if bos_token is not None:
            raise PackerError("--bos needs a --tokenizer: the built-in byte tokenizer has no BOS token")
        fp = hashlib.sha256(b"packer-bytes-v1").hexdigest()
        return TokenizerInfo(BYTES_NAME, "bytes", 257, BYTES_EOS if eos else None, BYTES_EOS, fp,
                             backend="bytes", backend_reason="built-in byte tokenizer",
                             added=f"no bos; eos {BYTES_EOS} (the byte tokenizer's)" if eos else "no bos; no eos (--no-eos)")

    path = _local_file(spec)
    tf_version = follow.transformers_version(spec)
    options = (eos, eos_token, bos, bos_token, split_special, follows, tf_version)  # the as-used record: the last two
    record, used = info_cache.keys(path, follow.config_paths(spec), options, ("as used", follows, tf_version)) \
        if path else (None, None)
    known = info_cache.load(record)
    if known is not None:  # resolved before, from these very bytes: no parse (0.75 s for Llama 3)
        known.update(notes=info_cache.notes_out(spec, known["notes"]), prefix=tuple(known["prefix"]),
                     suffix=None if known["suffix"] is None else tuple(known["suffix"]),
                     specials=tuple((int(i), str(t)) for i, t in known["specials"]),
                     plain_added=tuple((int(i), str(t)) for i, t in known["plain_added"]))
        return TokenizerInfo(spec, **known)
    info = _resolve_hf(spec, eos, eos_token, bos, bos_token, split_special, follows, while_waiting,
                       info_cache.load_as_used(used, spec))
    fields = {k: getattr(info, k) for k in info_cache.FIELDS} | {"notes": info_cache.notes_in(spec, info.notes)}
    info_cache.store(record, fields)
    info_cache.store_as_used(used, record, fields)
    return info


def _resolve_hf(spec: str, eos: bool, eos_token: str | None, bos: bool, bos_token: str | None,
                split_special: bool, follows: str = "transformers", while_waiting=None, used=None) -> TokenizerInfo:
    args = (eos, eos_token, bos, bos_token, split_special, follows)
    if used is not None:  # (JSON, notes) of the tokenizer as used, recorded under other options: no view to build
        from tokenizers import Tokenizer

        return _info_of(spec, Tokenizer.from_str(used[0]), list(used[1]), *args, known_json=used[0])
    folder = follow.folder_of(spec)
    pending = view_child.start(folder) if folder else None  # transformers' view, built while the file loads here
    early, guessed = None, None  # the likely resolve, made while the child runs
    try:
        file_tok = _load_hf(spec)
        file_json = file_tok.to_str() if pending is not None else None  # for the guess and as_used
        if pending is not None and while_waiting is not None:
            guessed = follow.guess(spec, file_tok, follows, file_json)
            try:
                early = _info_of(spec, guessed[0], [], *args, known_json=guessed[1] or file_json)
            except PackerError:  # (no EOS, say): decided below, on the tokenizer the build runs
                early = None
            if early is not None:
                while_waiting(early)
        tok, said = follow.as_used(spec, file_tok, follows, pending, guessed, file_json)
    finally:
        if pending is not None:
            pending.close()
    if early is not None and tok is guessed[0]:  # the guess held (follows.guess): its checks are done
        return replace(early, notes=((said,) if said else ()) + early.notes)
    return _info_of(spec, tok, [said] if said else [], *args)


def _info_of(spec: str, tok, notes: list[str], eos: bool, eos_token: str | None, bos: bool, bos_token: str | None,
             split_special: bool, follows: str, known_json: str | None = None) -> TokenizerInfo:
    """``tok``'s ``TokenizerInfo`` (ours: truncation, padding switched off), ``notes``; ``known_json``: its to_str()."""
    notes, changed = list(notes), tok.truncation is not None or tok.padding is not None
    if tok.truncation is not None:
        notes.append(f"truncation (max_length={tok.truncation.get('max_length')}) switched off: no text is cut")
        tok.no_truncation()
    if tok.padding is not None:
        notes.append("padding switched off: packer pads rows itself")
        tok.no_padding()
    as_json = tok.to_str() if known_json is None or changed else known_json
    vocab = tok.get_vocab(with_added_tokens=True)
    vocab_size = max(vocab.values()) + 1 if vocab else tok.get_vocab_size(True)

    specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
    eos_id = None
    if eos:
        if eos_token is not None:
            if eos_token not in vocab:
                raise PackerError(f"--eos-token {eos_token!r} is not in the vocabulary of {spec}")
            eos_id = vocab[eos_token]
        else:
            for cand in EOS_CANDIDATES:
                if cand in vocab and (cand in specials or cand == "<|endoftext|>"):
                    eos_id = vocab[cand]
                    break
            named = follow.config_eos(spec)  # the model's own, where none of the usual names is there (DeepSeek V3)
            if eos_id is None and named in vocab:
                eos_id = vocab[named]
            if eos_id is None:
                raise PackerError(
                    f"tokenizer {spec} has no end-of-document token I recognise "
                    f"(looked for {', '.join(EOS_CANDIDATES)} and tokenizer_config.json's eos_token): pass --eos-token TOKEN or --no-eos"
                )
    pad_id = next((vocab[c] for c in PAD_CANDIDATES if c in vocab), None)
    if pad_id is None:
        pad_id = eos_id if eos_id is not None else 0
    fp = hashlib.sha256(as_json.encode()).hexdigest()
    prefix, suffix, added = around_text.around(tok, spec, eos_id, bos, bos_token, vocab)
    tok.encode_special_tokens = split_special  # (our own object, built above)
    store(_LOADED, (fp, split_special), tok)  # an in-process Encoder reuses it instead of parsing the JSON again
    return TokenizerInfo(spec, "hf", vocab_size, eos_id, pad_id, fp, as_json, tuple(notes), prefix=prefix,
                         suffix=suffix, added=added, split_special=split_special,
                         specials=tuple(sorted(around_text.special_ids(tok, as_json).items())),
                         plain_added=tuple(sorted(around_text.plain_added_ids(tok).items())), follows=follows)


def choose_backend(info: TokenizerInfo, requested: str = "auto", sample=lambda: [], fast: bool | int = True) -> TokenizerInfo:
    """``info`` with the backend set: ``requested`` is "auto", "hf" or "tiktoken".

    "auto" uses tiktoken where it runs the tokenizer exactly and gives HF's
    ids on the fixed hard strings and on ``sample()`` (input texts), else HF;
    a fallback for a surprising reason (tiktoken missing, a difference found)
    is added to ``notes``. "tiktoken" that cannot be exact raises PackerError.
    """
    info, later = _choose(info, requested, sample, False, fast)
    return info


def choose_backend_later(info: TokenizerInfo, requested: str = "auto", fast: bool | int = True):
    """``choose_backend`` up to the check on input texts, which it leaves to the caller:
    (info, None) when decided, else (info with tiktoken, the ``InputCheck`` to run; then
    ``with_choice(info, check.outcome(result))``). A build runs it on a worker (backend/input_check.py)."""
    return _choose(info, requested, lambda: [], True, fast)


def with_choice(info: TokenizerInfo, c) -> TokenizerInfo:
    """``info`` with the backend of ``c`` (a ``tiktoken_backend.Choice``)."""
    notes = info.notes + ((f"tokenizer backend: {c.reason}",) if c.fallback else ())
    return replace(info, backend=c.backend, backend_reason=c.reason, notes=notes)


def _choose(info: TokenizerInfo, requested: str, sample, defer: bool, fast: bool | int = True):
    from .backend.tiktoken_backend import choose

    check_backend(requested)
    if info.kind != "hf":
        if requested in FORCED:
            raise PackerError(f"--tokenizer-backend {requested} needs a --tokenizer: the built-in byte tokenizer has no BPE")
        return info, None
    hf = _LOADED.get((info.fingerprint, info.split_special))
    if hf is None:
        hf = lambda: loaded_hf(info)  # noqa: E731  (parsed only if a check needs it)
    c = choose(info.json, info.fingerprint, requested, sample, hf, info.split_special, defer_input=defer,
               fast=fast)  # fast: fastokens may take auto (tokenize/backend/fastokens_backend.py)
    return with_choice(info, c), c.later


def loaded_hf(info: TokenizerInfo):
    """The ``tokenizers.Tokenizer`` of ``info`` (kind "hf"), encoding special-token strings as ``info``
    says: the one this process resolved, or parsed from ``info.json`` once (a resolve read from its
    record parsed nothing). Shared: callers must not change it."""
    def parse():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(info.json)
        tok.encode_special_tokens = info.split_special  # (a new object: no one else holds it yet)
        return tok

    return remember(_LOADED, (info.fingerprint, info.split_special), parse)


def forget_parsed() -> None:
    """Forget the HF tokenizers, cut rules, tiktoken encoders and checks this process parsed or ran
    (their records on disk, ``PACKER_CACHE``, stay): the state of a new process. For tests and
    benchmarks of a build's start."""
    from .backend import fastokens_alone, fastokens_backend, gigatoken_backend, tiktoken_backend

    for cache in (_LOADED, _CUT_RULE, tiktoken_backend._STATIC, tiktoken_backend._ENCODERS, fastokens_alone._ALONE,
                  fastokens_backend._FASTER, gigatoken_backend._CHECKED):
        cache.clear()


def parsed_hf() -> int:
    """How many HF tokenizers this process holds parsed (``loaded_hf``): 0 where a build needed none."""
    return len(_LOADED)


class Encoder:
    """Encodes batches of text to token ids, EOS appended. One per process.

    Two views of the same result: ``encode_flat`` (what the build uses: one
    flat array, cheap to move between processes) and ``encode_batch`` (one
    array per text). Parallelism is the caller's business: the build runs one
    Encoder per core, and the HF tokenizer is told to stay on its thread.
    """

    def __init__(self, info: TokenizerInfo):
        self.info = info
        self._eos = np.array([info.eos_id] if info.eos_id is not None else [], dtype=np.uint32)
        self._pre, self._post = list(info.prefix), list(info.after)
        self._specials = dict(info.specials) if not info.split_special else {}
        self._plain = dict(info.plain_added)  # cut out of text whatever --split-special-tokens says
        self._tk = None
        if info.kind == "hf" and info.backend in ("tiktoken", "fastokens", "gigatoken"):  # fastokens: backend/fastokens_backend.py
            from .backend.tiktoken_backend import encoder_for

            self._tk = encoder_for(info.json, info.fingerprint, _LOADED.get((info.fingerprint, info.split_special)),
                                   info.split_special, info.backend)
        elif info.kind == "hf":
            self._tok = loaded_hf(info)
            self._batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
            rule = remember(_CUT_RULE, (info.fingerprint, info.split_special),
                            lambda: long_texts.recorded_cut_rule(info.fingerprint, info.split_special, lambda: self._tok))
            self._cut = rule is None

    @property
    def tiktoken(self):
        """The ``TiktokenEncoder`` that encodes (backend "tiktoken"), else None."""
        return self._tk

    def encode_flat(self, texts: list[str], dtype="uint32") -> tuple[np.ndarray, np.ndarray]:
        """Encode ``texts``; return (ids, lengths).

        ``ids`` is of shape (sum(lengths),): each text's prefix (BOS), its ids, then its suffix
        (EOS, if on), texts in order; in ``dtype`` (uint32, or the shard dtype, which holds every id:
        made in it, a huge text's ids are never held twice). ``lengths`` is int64 of shape
        (len(texts),), prefix and suffix included. A text over ``long_texts.LONG_CHARS`` is encoded
        in pieces (long_texts.py): memory follows the piece, not the text.
        """
        if self.info.kind == "bytes":
            return long_texts.bytes_flat(texts, self._eos, dtype)
        if self._tk is not None:
            pre, post = tuple(self._pre), tuple(self._post)
            if any(len(t) > long_texts.LONG_CHARS for t in texts) and self._may_cut():
                return long_texts.flat_in_pieces(texts, self._tk.encode_flat, pre, post, dtype)
            ids, lengths = self._tk.encode_flat(texts, post, pre)
            return ids.astype(dtype, copy=False), lengths
        # Long texts go in pieces, a few at a time (packer/tokenize/long_texts.py): HF
        # holds ~250 bytes per token of what one call encodes.
        if self._cut and any(len(t) > long_texts.PIECE_CHARS for t in texts):
            at = [long_texts.cut_at(t) for t in texts]
            ends = np.cumsum([len(b) - 1 for b in at]).tolist()  # ends[i]: pieces up to and including text i's
            calls = long_texts.cut_batches(texts, at)
        else:
            ends, calls = range(1, len(texts) + 1), [texts]
        # e.ids builds a Python list per text; that getter is the one copy we
        # cannot avoid. array('I').extend is the cheapest way from those lists
        # to one buffer (about 10 ns/token, vs ~18 for np.array per text).
        pre, post = self._pre, self._post
        buf = array("H" if np.dtype(dtype) == np.uint16 else "I")  # (the shard dtype holds every id)
        lengths = np.zeros(len(texts), dtype=np.int64)
        doc, piece, start = 0, 0, 0
        for call in calls:
            for e in self._batch(call, add_special_tokens=False):
                if pre and len(buf) == start:  # the document's first piece
                    buf.extend(pre)
                buf.extend(e.ids)
                piece += 1
                if piece == ends[doc]:
                    buf.extend(post)
                    lengths[doc], start, doc = len(buf) - start, len(buf), doc + 1
        return np.frombuffer(buf, dtype=buf.typecode).astype(dtype, copy=False), lengths

    def _may_cut(self) -> bool:
        """Whether texts may be cut for this tokenizer (long_texts.cut_rule), for tiktoken and fastokens:
        they give HF's ids on every text, so on the pieces too. Asked only when a text over
        ``long_texts.LONG_CHARS`` comes, so a build of ordinary texts never parses the HF tokenizer, and read
        from the machine's record where a build recorded it (``long_texts.recorded_cut_rule``)."""
        key = (self.info.fingerprint, self.info.split_special)
        return remember(_CUT_RULE, key, lambda: long_texts.recorded_cut_rule(*key, lambda: loaded_hf(self.info))) is None

    def specials_found(self, texts: list[str], ids: np.ndarray, lengths: np.ndarray) -> list[tuple[int, str]]:
        """(document index, token string) for every special token's string met in a text and encoded
        as the special id (never with --split-special-tokens). ``ids``, ``lengths``: ``encode_flat(texts)``."""
        return around_text.found_in(texts, ids, lengths, tuple(self._pre), tuple(self._post), self._specials)

    def added_found(self, texts: list[str], ids: np.ndarray, lengths: np.ndarray) -> list[tuple[int, str]]:
        """``specials_found`` for the added tokens that are not special (Qwen3's ``<think>``, Gemma 3's
        ``<unusedN>``): HF gives their one id for their string in text, --split-special-tokens or not."""
        return around_text.found_in(texts, ids, lengths, tuple(self._pre), tuple(self._post), self._plain)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Return one uint32 array per text: its ids, then EOS (if on)."""
        ids, lengths = self.encode_flat(texts)
        return np.split(ids, np.cumsum(lengths)[:-1]) if len(lengths) else []


def describe(info: TokenizerInfo) -> str:
    """One line for the summary."""
    eos = "no EOS" if info.eos_id is None else f"EOS id {info.eos_id}"
    return f"{info.name} ({info.kind}, vocab {info.vocab_size}, {eos}, pad id {info.pad_id}; {info.added})"
