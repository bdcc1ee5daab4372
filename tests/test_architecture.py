"""The package's shape, as docs/architecture.md states it: which stage may import which, and no import cycles.

Every import counts, including those inside functions (a lazy import still
makes a dependency; it only hides it from a reader).
"""

from __future__ import annotations

import ast
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "packer")

# Stage -> the stages it may import (besides itself). "errors", "faults" and "procs" are leaves every stage may use.
ALLOWED = {
    "io": set(),
    "formats": {"io"},
    "tokenize": set(),
    "pack": set(),
    "shards": {"io"},
    "pipeline": {"io", "formats", "tokenize", "pack", "shards"},
    "train": {"io", "shards"},
    "inspect": {"io", "shards", "tokenize", "formats"},
    "cli": {"io", "formats", "tokenize", "pack", "shards", "pipeline", "inspect"},
    "__init__": {"pipeline", "pack", "train"},
}
LEAVES = {"errors", "faults", "procs"}


def modules() -> dict[str, str]:
    """{dotted module name: file path} for every module of the package."""
    out = {}
    for top, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(top, f), os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(top, f)
    return out


def imports(name: str, path: str, known: set[str]) -> set[str]:
    """The packer modules ``name`` imports, anywhere in its body."""
    pkg = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("packer"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("packer"):
                continue
            for a in node.names:  # "from . import shards" imports a module
                found.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod)
    return {m for m in found if m != name}


def stage(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


GRAPH = {}
_MODS = modules()
for _n, _p in _MODS.items():
    GRAPH[_n] = imports(_n, _p, set(_MODS))


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_each_stage_imports_only_what_it_may(module):
    s = stage(module)
    for dep in GRAPH[module]:
        d = stage(dep)
        if d == s or d in LEAVES:
            continue
        assert d in ALLOWED[s], f"{module} imports {dep}: stage {s!r} may import only {sorted(ALLOWED[s] | LEAVES)}"


def test_no_import_cycles():
    """Between modules, counting package __init__ re-exports as the modules they import."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(GRAPH.get(m, ())):
            if d.startswith(m + "."):  # a package importing its own submodules is not a cycle
                continue
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                if not any(a.startswith(b + ".") or b.startswith(a + ".") for a, b in zip(cycle, cycle[1:])):
                    raise AssertionError("import cycle: " + " -> ".join(cycle))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_torch_stays_on_the_training_side():
    """The build path must not import torch (a CPU box builds shards without it)."""
    for name, path in _MODS.items():
        if stage(name) in ("train",):
            continue
        tree = ast.parse(open(path).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "torch" for a in node.names), f"{name} imports torch"
            elif isinstance(node, ast.ImportFrom) and not node.level:
                assert (node.module or "").split(".")[0] != "torch", f"{name} imports torch"


# Inside packer/pipeline/: module -> the pipeline modules it may import (docs/architecture.md's table).
PIPELINE = {
    "config": set(), "report": set(), "plan": {"config"}, "chat_unit": {"plan"}, "spill": {"plan"},
    "unit": {"plan", "chat_unit"}, "output": {"unit"},
    "engines": {"plan", "unit", "spill", "engines"},
    "backend_check": {"config", "engines", "unit"},
    "steps": {"backend_check", "chat_unit", "config", "engines", "output", "plan", "report", "unit"},
}


def test_pipeline_modules_import_as_the_table_says():
    for name, deps in GRAPH.items():
        if not name.startswith("packer.pipeline."):
            continue
        own = name.split(".")[2]
        for dep in deps:
            if dep.startswith("packer.pipeline.") and dep.split(".")[2] != own:
                assert dep.split(".")[2] in PIPELINE[own], f"{name} imports {dep} (docs/architecture.md)"


def _tree(path):
    return ast.parse(open(path).read())


def test_no_module_over_400_lines_no_function_over_100_no_global():
    for name, path in _MODS.items():
        lines = len(open(path).read().splitlines())
        assert lines <= 400, f"{name}: {lines} lines (at most 400)"
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                assert n <= 100, f"{name}.{node.name}: {n} lines (at most 100)"
            assert not isinstance(node, ast.Global), f"{name}:{node.lineno}: a global statement"


def test_bench_stays_small_and_docs_benchmarks_names_every_script():
    """bench/ holds what docs/benchmarks.md cites, at most 4,000 lines of Python (issue 28): a script
    whose figures are all that is left of it goes, and its figures name the commit where it last was."""
    bench = os.path.join(os.path.dirname(ROOT), "bench")
    files = [os.path.join(top, f) for top, _, names in os.walk(bench) for f in names if f.endswith(".py")]
    lines = sum(len(open(f).read().splitlines()) for f in files)
    assert lines <= 4000, f"bench/ holds {lines} lines of Python (at most 4,000)"
    with open(os.path.join(os.path.dirname(ROOT), "docs", "benchmarks.md")) as f:
        doc = f.read()
    unnamed = sorted(f for f in os.listdir(bench) if f.endswith(".py") and not re.search(rf"(?<!\w){re.escape(f)}", doc))
    assert not unnamed, f"docs/benchmarks.md names no {unnamed} (bench/ holds what it cites)"


def _test_file_for(module: str) -> str:
    """tests/<pkg>/test_<module>.py for packer.<pkg>.<module> (a module at the top: tests/test_<module>.py)."""
    parts = module.split(".")[1:]
    return os.path.join(os.path.dirname(ROOT), "tests", *parts[:-1], f"test_{parts[-1]}.py")


def test_tests_mirror_the_modules():
    """At least 80% of the modules over 60 lines have a test file of their name (docs/architecture.md)."""
    big = [m for m, p in _MODS.items() if not p.endswith("__init__.py") and len(open(p).read().splitlines()) > 60]
    missing = sorted(m for m in big if not os.path.exists(_test_file_for(m)))
    assert len(big) - len(missing) >= 0.8 * len(big), f"{len(missing)} of {len(big)} without a test file: {missing}"
