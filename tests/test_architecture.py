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

# Stage -> the stages it may import (besides itself). "errors", "faults", "procs" and "head_start" are leaves every stage may use.
ALLOWED = {
    "io": set(),
    "formats": {"io"},
    "tokenize": set(),
    "pack": set(),
    "shards": {"io"},
    "pipeline": {"io", "formats", "tokenize", "pack", "shards"},
    "train": {"io", "shards"},
    "inspect": {"io", "shards", "tokenize", "formats"},
    "repacking": {"io", "shards", "pack", "pipeline"},  # finished builds in, a build at another length out
    "cli": {"io", "formats", "tokenize", "pack", "shards", "pipeline", "inspect", "repacking", "cli_common", "cli_reuse"},
    "cli_common": {"io"},  # one line per mistake, the exit codes: what every command shares
    "cli_reuse": {"pipeline", "inspect", "repacking", "exports", "cli_common"},  # commands over finished builds
    "exports": {"io", "shards", "repacking"},  # a finished build in another trainer's files
    "__init__": {"pipeline", "pack", "train", "repacking", "exports"},
    "_entry": {"cli"},  # the `packer` script's main (and python -m packer's): imports packer.cli once SIGINT is caught
    "__main__": {"_entry"},  # python -m packer
}
LEAVES = {"errors", "faults", "procs", "head_start"}


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
            found.update(a.name for a in node.names if a.name == "packer" or a.name.startswith("packer."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod != "packer" and not mod.startswith("packer."):
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



def test_without_torch_the_training_side_says_what_to_install():
    """The README's first command installs no torch: ``from packer import PackedDataset`` there is one ImportError
    naming what to install, not torch's ModuleNotFoundError from inside packer; the build side still imports."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"  # any import of torch fails, as where it is not installed
            "import packer; assert callable(packer.build) and callable(packer.hf_dataset)\n"
            "from packer import PackedDataset")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.path.dirname(ROOT))
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: packer.PackedDataset is on the training side and needs PyTorch"), r.stderr
    assert "pip install torch" in last and "ModuleNotFoundError" not in r.stderr, r.stderr


def test_dir_of_packer_lists_the_lazy_names():
    """Issue 55.8: dir(packer) (tab completion) lists build, PackedDataset and the other lazy exports, before
    any of them is imported; listing them imports nothing (torch stays out)."""
    import subprocess
    import sys

    code = ("import sys, packer; names = dir(packer)\n"
            "assert set(packer.__all__) <= set(names), sorted(set(packer.__all__) - set(names))\n"
            "assert 'build' in names and 'PackedDataset' in names and '__version__' in names\n"
            "assert 'torch' not in sys.modules and 'packer.pipeline' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.path.dirname(ROOT))
    assert r.returncode == 0, r.stderr

# tokenize has three doors (docs/architecture.md): everything outside packer/tokenize/ (the other stages,
# cli, bench/ and the tests of other stages) imports these packages, never a module file inside them.
TOKENIZE_DOORS = {"packer.tokenize", "packer.tokenize.backend", "packer.tokenize.chat"}


def _absolute_imports(path: str) -> set[str]:
    """The packer modules a script or test imports (absolute imports and importlib.import_module("...") alike),
    "from packer.tokenize import backend" counted as the package packer.tokenize.backend."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in _MODS else node.module
                         for a in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return {m for m in found if m.startswith("packer")}


def test_other_stages_go_through_the_tokenize_doors():
    repo = os.path.dirname(ROOT)
    users = {name: deps for name, deps in GRAPH.items() if stage(name) != "tokenize"}
    for top in ("bench", "tests"):
        for d, _, files in os.walk(os.path.join(repo, top)):
            if os.path.relpath(d, repo).split(os.sep)[:2] == ["tests", "tokenize"]:
                continue  # tokenize's own tests may test its module files
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(d, f)
                    users[os.path.relpath(path, repo)] = _absolute_imports(path)
    assert len(users) > 100
    for name, deps in users.items():
        for dep in deps:
            if dep.startswith("packer.tokenize.") or dep == "packer.tokenize":
                assert dep in TOKENIZE_DOORS, f"{name} imports {dep}: outside tokenize, import {sorted(TOKENIZE_DOORS)}"


def test_the_tokenize_doors_name_what_they_export():
    """Each door's __init__ lists its names (__all__), and each of them is there."""
    import importlib

    for door in sorted(TOKENIZE_DOORS):
        mod = importlib.import_module(door)
        assert isinstance(getattr(mod, "__all__", None), list) and mod.__all__, f"{door} has no __all__"
        assert all(hasattr(mod, n) for n in mod.__all__), door


# Inside packer/pipeline/: module -> the pipeline modules it may import (docs/architecture.md's table).
PIPELINE = {
    "options": set(), "config": {"options"}, "report": set(), "plan": {"config"}, "chat_unit": {"plan"},
    "spill": {"plan"}, "packed": set(), "progress": set(), "unit": {"config", "plan", "chat_unit", "packed"},
    "output": {"unit", "packed"},
    "engines": {"plan", "unit", "spill", "engines", "progress"},
    "backend_check": {"config", "engines", "unit"},
    "steps": {"backend_check", "chat_unit", "config", "engines", "options", "output", "plan", "report", "unit"},
    "__init__": set(),  # (lazy: each name imported from its module on first use)
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
    """bench/ holds what docs/benchmarks.md cites, at most 5,350 lines of Python (issue 28's 4,200, the
    scripts of repack, export and the length curricula, issue 52's encoders, 55's stop timings, 53.3's huge record,
    52.2's gigatoken JSON Lines and Parquet semantics): a script
    whose figures are all that is left of it goes, and its figures name the commit where it last was."""
    bench = os.path.join(os.path.dirname(ROOT), "bench")
    files = [os.path.join(top, f) for top, _, names in os.walk(bench) for f in names if f.endswith(".py")]
    lines = sum(len(open(f).read().splitlines()) for f in files)
    assert lines <= 5350, f"bench/ holds {lines} lines of Python (at most 5,350)"
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


def _cited_paths():
    """(where, path, name) for every ``packer/...py`` and ``tests/...py[::name]`` that docs/, README.md or the code names."""
    top = os.path.dirname(ROOT)
    texts = [os.path.join(top, "README.md")] + [os.path.join(top, "docs", f) for f in os.listdir(os.path.join(top, "docs"))
                                                if f.endswith(".md")]
    for sub in ("packer", "bench", "tests"):
        texts += [os.path.join(t, f) for t, _, fs in os.walk(os.path.join(top, sub)) for f in fs if f.endswith(".py")]
    for where in texts:
        for m in re.finditer(r"\b((?:packer|tests)/[\w/]+\.py)(?:::(\w+)\b(?!\*))?", open(where, encoding="utf-8").read()):
            yield os.path.relpath(where, top), m.group(1), m.group(2)


def test_every_cited_module_and_test_exists():
    """A path named in docs or code (a module, or a test by its file and name) is there: a move
    that leaves a name behind fails here, not in a reader's head."""
    top = os.path.dirname(ROOT)
    missing = []
    for where, path, name in _cited_paths():
        full = os.path.join(top, path)
        if not os.path.isfile(full):
            missing.append(f"{where}: {path}")
        elif name and not re.search(rf"\b(def|class) {name}\b", open(full, encoding="utf-8").read()):
            missing.append(f"{where}: {path}::{name}")
    assert not missing, "\n".join(sorted(set(missing)))
# pyarrow's IPC readers and writers, and its memory maps: the shard format is read and written in
# packer/shards/ alone (issue 38.2), and inputs in Arrow IPC are read by packer/formats/.
IPC_NAMES = {"ipc", "memory_map", "RecordBatchFileReader", "RecordBatchFileWriter", "RecordBatchStreamReader",
             "RecordBatchStreamWriter", "open_file", "open_stream", "new_file", "new_stream"}
IPC_STAGES = {"shards", "formats"}


def _ipc_uses(tree) -> list[tuple[int, str]]:
    """(line, what) of every use of pyarrow's IPC module or its memory maps in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("ipc", "memory_map") and \
                isinstance(node.value, ast.Name) and node.value.id in ("pa", "pyarrow"):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("pyarrow.ipc")]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if (node.module or "").startswith("pyarrow.ipc"):
                found.append((node.lineno, node.module))
            elif node.module == "pyarrow":
                found += [(node.lineno, f"pyarrow.{a.name}") for a in node.names if a.name in IPC_NAMES]
    return found


def test_only_shards_and_formats_read_or_write_arrow_ipc():
    for name, path in _MODS.items():
        if stage(name) in IPC_STAGES:
            continue
        uses = _ipc_uses(_tree(path))
        assert not uses, f"{name}:{uses[0][0]}: {uses[0][1]} (Arrow IPC is read and written in packer/shards/ only)"


def test_the_ipc_rule_sees_each_spelling():
    src = ("import pyarrow as pa\nimport pyarrow.ipc\nfrom pyarrow import ipc\nfrom pyarrow.ipc import open_file\n"
           "pa.ipc.open_file(x)\npa.memory_map(p)\n")
    assert sorted(line for line, _ in _ipc_uses(ast.parse(src))) == [2, 3, 4, 5, 6]


# Where code outside packer/io/ still reads Storage.local, and why (docs/architecture.md says the same):
LOCAL_READERS = {
    "packer.pipeline.engines.ray": "a Ray worker runs in the driver's folder when a path (not a URI) is relative",
    "packer.repacking.run": "a repack's Ray task runs in the driver's folder when a path (not a URI) is relative",
    "packer.shards.manifest_stream": "a local manifest is read in blocks from a file it opened, an object in one GET",
    "packer.shards.index": "a local manifest is stat'ed and hashed in blocks; an object store's not-found comes as "
                           "another OSError, and its size comes from the bytes hashed",
}


def test_only_io_tells_local_from_remote():
    """Outside packer/io/, code asks its Storage what it needs (``reads_in_place``, ``fork_safe``,
    ``stamp_covers_content``, ``sizes_by_listing``, ``identity``, ``missing_folder``, ``map_or_read``, ``lock``,
    ``held_by``); ``.local`` is read only in the modules listed above, each for the reason given."""
    found = {}
    for name, path in _MODS.items():
        if stage(name) == "io":
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Attribute) and node.attr == "local" and not (
                    isinstance(node.value, ast.Name) and node.value.id == "threading"):
                found.setdefault(name, node.lineno)
    assert set(found) <= set(LOCAL_READERS), {n: line for n, line in found.items() if n not in LOCAL_READERS}


# The package a stage's other stages import it through (its door): the package itself, or for tokenize its three doors.
DOORS = {"tokenize": TOKENIZE_DOORS}


def test_other_stages_import_a_stage_through_its_package():
    """``from ..io import cpu_limit``, never ``from ..io.cpus import cpu_limit``: a stage's modules can be split or
    merged without touching its users (issue 38.5). Leaves (errors, faults, procs) and pack are single modules."""
    bad = []
    for name, path in _MODS.items():
        for imp in imports(name, path, set(_MODS)):
            target = stage(imp)
            if target == stage(name) or target in LEAVES or imp.count(".") < 2:
                continue
            doors = DOORS.get(target, {f"packer.{target}"})
            if not any(imp == d for d in doors):
                bad.append(f"{name} imports {imp}")
    assert not bad, "\n".join(sorted(bad))


def test_no_module_only_re_exports():
    """A module file that only imports names for others to import from it is a shim left behind by a move: its
    users import the name's home (or the package's door, an ``__init__``) instead (issue 38.5)."""
    shims = []
    for name, path in _MODS.items():
        if path.endswith("__init__.py"):
            continue
        body = [n for n in _tree(path).body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        rest = [n for n in body if not isinstance(n, (ast.Import, ast.ImportFrom))
                and not (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets))]
        if body and not rest:
            shims.append(name)
    assert not shims, shims
