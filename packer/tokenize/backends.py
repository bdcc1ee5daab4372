"""The tokenizer backends a build may ask for (``--tokenizer-backend``), defined once.

"Backend" is what encodes an HF tokenizer (HF ``tokenizers`` or tiktoken);
"engine" is where a build's units run (local, ray: packer/pipeline/engines/).
"""

from __future__ import annotations

from ..errors import PackerError

BACKENDS = ("auto", "hf", "tiktoken")  # auto = tiktoken where it gives HF's ids exactly, else hf


def check_backend(name: str) -> str:
    """``name`` if it is one of ``BACKENDS``, else ``PackerError`` (one line naming the choices)."""
    if name not in BACKENDS:
        raise PackerError(f"unknown --tokenizer-backend {name!r}: choose from {', '.join(BACKENDS)}")
    return name
