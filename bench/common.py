"""Helpers shared by the bench scripts (run as `python bench/NAME.py`, so this imports as `common`)."""

from __future__ import annotations

import json


def emit_json(result: dict, path: str | None) -> None:
    """Print ``result`` as one JSON line, and append that line to ``path`` when given."""
    line = json.dumps(result)
    print(line)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
