"""The backends that encode an HF tokenizer where they give HF's ids exactly, and the checks that say where.

``tiktoken_backend`` runs byte-level BPE through tiktoken (``convert`` decides whether a
tokenizer.json can be expressed in it: tiktoken_convert.py; ``check`` compares it with HF:
tiktoken_check.py; NFC/NFKC first with HF's own tables: normalize.py); ``fastokens_backend``
encodes faster still over a checked tiktoken conversion. ``check_cache`` records passed checks,
and ``input_check`` decides a build's backend (``choose_for_build``): from the tokenizer, a
record, or a check on input texts left to the caller (``PendingCheck``).
"""

from .input_check import CHAT_REASON, InputRecord, PendingCheck, choose_for_build, enough_bytes, sample_slices
from .normalize import Normalizer
from .tiktoken_backend import SAMPLE_CHARS, SAMPLE_DOCS, SAMPLE_TEXT_CHARS, TiktokenEncoder, run_input_check
from .tiktoken_check import CheckResult, check
from .tiktoken_convert import convert

__all__ = ["CHAT_REASON", "CheckResult", "InputRecord", "Normalizer", "PendingCheck", "SAMPLE_CHARS", "SAMPLE_DOCS",
           "SAMPLE_TEXT_CHARS", "TiktokenEncoder", "check", "choose_for_build", "convert", "enough_bytes", "run_input_check",
           "sample_slices"]
