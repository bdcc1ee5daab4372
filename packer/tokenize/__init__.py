"""Tokenize: resolve what ``--tokenizer`` names, pick the backend, encode batches of text.

The front door of the stage: other stages import ``packer.tokenize``,
``packer.tokenize.backend`` and ``packer.tokenize.chat``, never a module file
inside them (tests/test_architecture.py).

``tokenizer`` loads HF tokenizers (or the built-in byte tokenizer) into a
picklable ``TokenizerInfo`` and encodes with an ``Encoder``; ``backend/``
runs byte-level BPE through tiktoken or fastokens where it gives HF's ids
exactly, and decides where that is; ``chat/`` renders conversations by their
chat templates; ``long_texts`` cuts very long texts where that provably
leaves the ids unchanged; ``follows`` builds a model folder's tokenizer as
transformers does.
"""

from .backends import BACKENDS, check_backend
from .follows import FOLLOWS, check_follows
from .tokenizer import (BYTES_EOS, BYTES_NAME, Encoder, TokenizerInfo, choose_backend, describe, forget_parsed,
                        loaded_hf, parsed_hf, resolve_tokenizer)

__all__ = ["BACKENDS", "BYTES_EOS", "BYTES_NAME", "Encoder", "FOLLOWS", "TokenizerInfo", "check_backend",
           "check_follows", "choose_backend", "describe", "forget_parsed", "loaded_hf", "parsed_hf",
           "resolve_tokenizer"]
