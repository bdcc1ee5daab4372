"""One small keyed cache, so that what a function returns depends on its arguments only.

The tokenizer side keeps a few expensive objects per process (a parsed HF
tokenizer: 0.5 s for Llama 3; a checked tiktoken encoder; a cut rule). Each lives
in a dict keyed on everything that decides it (the tokenizer's fingerprint, the
split-special setting, ...), holds the last ``keep`` keys (a Llama 3 tokenizer is
hundreds of MB), and is never changed once stored: another key gets its own object.
"""

from __future__ import annotations


def remember(cache: dict, key, make, keep: int = 1):
    """``cache[key]``; on a miss ``make()``, stored under ``key`` (the oldest keys dropped to keep ``keep``)."""
    try:
        return cache[key]
    except KeyError:
        pass
    value = make()
    store(cache, key, value, keep)
    return value


def store(cache: dict, key, value, keep: int = 1) -> None:
    """Put ``value`` under ``key``, dropping the oldest keys beyond ``keep``."""
    cache.pop(key, None)
    while len(cache) >= keep:
        cache.pop(next(iter(cache)))
    cache[key] = value
