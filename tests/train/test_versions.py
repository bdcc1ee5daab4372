"""The versions docs/training.md says were tested are the versions installed (issue 55.7).

A new minor release of transformers, TRL or datasets fails here, loudly, instead of running (or skipping)
unnoticed: the attention rule, TRL's collator and hf_dataset's transform depend on their internals."""

from __future__ import annotations

import importlib
import os
import re

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "training.md")
# the package, as docs/training.md names it, and the tests that hold packer's use of it
WATCHED = {"transformers": "tests/train/test_hf.py, test_trainer.py, test_trl.py, tests/tokenize/test_follows_rule.py",
           "TRL": "tests/train/test_trl.py",
           "datasets": "tests/shards/test_hf_datasets.py, tests/train/test_trl.py, test_trainer.py"}


def _recorded() -> dict[str, str]:
    """{name: "major.minor"} from docs/training.md's "Versions tested:" line."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    line = re.search(r"^Versions tested: (.*)$", text, re.M)
    assert line, "docs/training.md has no 'Versions tested:' line"
    return {m.group(1): m.group(2) for m in re.finditer(r"(\w+) (\d+\.\d+)", line.group(1))}


@pytest.mark.parametrize("name", sorted(WATCHED))
def test_the_installed_version_is_the_recorded_one(name):
    module = importlib.import_module(name.lower())
    installed = ".".join(module.__version__.split(".")[:2])
    recorded = _recorded().get(name)
    assert installed == recorded, (
        f"{name} {module.__version__} is installed, docs/training.md records {name} {recorded}: run "
        f"{WATCHED[name]} against it, check the rules there still hold, then record {name} {installed} in "
        "docs/training.md's 'Versions tested' line")
