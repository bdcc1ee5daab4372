"""The recipes of docs/training.md marked tested, run in order in one scope on a real build."""

from __future__ import annotations

import os
import re

import pytest

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "training.md")


def test_training_recipes_run(short_docs_build, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    pytest.importorskip("torchdata")
    with open(DOC) as f:
        blocks = re.findall(r"<!-- tested -->\n```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 3  # plain loop, Trainer, StatefulDataLoader
    scope: dict = {"tmp": tmp_path}
    for k, code in enumerate(blocks):
        exec(compile(code.replace('"out/"', repr(short_docs_build)), f"{DOC} (tested block {k})", "exec"), scope)
    assert scope["state"]["position"] == 3 * 4  # the loop stopped after 3 batches of 4
    assert scope["trainer"].state.global_step == 2
