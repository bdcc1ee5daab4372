"""The recipes of docs/training.md marked tested, run in order in one scope on a real build, as a
CPU-only machine runs them (issue 42.5: TRL's block failed there on its bf16 default)."""

from __future__ import annotations

import os
import re

import pytest

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "training.md")


def byte_tokenizer(vocab_size: int):
    """The set-up the TRL block names: a transformers tokenizer for the build's (byte) vocabulary, with a
    pad token named as docs/training.md says (a vocabulary of its own has neither pad nor EOS)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0")


def test_training_recipes_run(short_docs_build, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    pytest.importorskip("torchdata")
    pytest.importorskip("trl")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # as on a CPU-only machine
    with open(DOC) as f:
        blocks = re.findall(r"<!-- tested -->\n```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 4  # plain loop, Trainer, StatefulDataLoader, TRL
    scope: dict = {"tmp": tmp_path}
    for k, code in enumerate(blocks):
        if "SFTTrainer" in code:
            scope["tokenizer"] = byte_tokenizer(scope["ds"].vocab_size)
        exec(compile(code.replace('"out/"', repr(short_docs_build)), f"{DOC} (tested block {k})", "exec"), scope)
    assert scope["state"]["position"] == 3 * 4  # the loop stopped after 3 batches of 4
    assert scope["trainer"].state.global_step == 2  # TRL's trainer, the last block
    assert type(scope["trainer"]).__name__ == "SFTTrainer"
