"""The tokenizer backends a build may ask for (``--tokenizer-backend``), defined once.

"Backend" is what encodes an HF tokenizer (HF ``tokenizers`` or tiktoken);
"engine" is where a build's units run (local, ray: packer/pipeline/engines/).
"""

from __future__ import annotations

from ..errors import PackerError

# auto = the fastest encoder that gives HF's ids exactly for the tokenizer and input size (fastokens, else
# tiktoken, else hf); any other name forces that encoder, and stops the build in one line where it is not exact.
BACKENDS = ("auto", "hf", "tiktoken", "fastokens", "gigatoken")  # gigatoken: by name; auto's for Gemma 3's kind
FORCED = ("tiktoken", "fastokens", "gigatoken")  # exact encoders a build may force: refused, they stop it


def check_backend(name: str) -> str:
    """``name`` if it is one of ``BACKENDS``, else ``PackerError`` (one line naming the choices)."""
    if name not in BACKENDS:
        raise PackerError(f"unknown --tokenizer-backend {name!r}: choose from {', '.join(BACKENDS)}")
    return name
