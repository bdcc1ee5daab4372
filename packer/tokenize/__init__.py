"""Tokenize: resolve what ``--tokenizer`` names, pick the backend, encode batches of text.

``tokenizer`` loads HF tokenizers (or the built-in byte tokenizer) into a
picklable ``TokenizerInfo`` and encodes with an ``Encoder``;
``tiktoken_backend`` runs byte-level BPE through tiktoken where it gives HF's
ids exactly; ``long_texts`` cuts very long texts where that provably leaves
the ids unchanged.
"""

from .tokenizer import BYTES_EOS, BYTES_NAME, Encoder, TokenizerInfo, choose_backend, describe, resolve_tokenizer

__all__ = ["BYTES_EOS", "BYTES_NAME", "Encoder", "TokenizerInfo", "choose_backend", "describe", "resolve_tokenizer"]
