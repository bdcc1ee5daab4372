"""A `packer build`'s fast encoder loaded while packer itself is imported.

fastokens parses a tokenizer in 0.35 s (GPT-2) and releases the GIL while it
does; packer's imports (numpy, pyarrow, the formats: ~0.4 s) hold the GIL.
Until now they ran one after the other, both before any worker starts: most of
a 16-worker build's serial start (docs/benchmarks.md, "Per-chunk cuts"). So the
command's entry point (``packer._entry``, ``python -m packer.cli``) calls
``begin`` before it imports anything else: where the last build with this
``--tokenizer`` ran fastokens, the tokenizer JSON it loaded (kept here by
``remember``) is loaded again in a thread. The backend's own load
(packer/tokenize/backend/fastokens_backend.py) takes that thread's result only
for the very same JSON text, so a stale record costs a wasted load, never
other ids. ``settle`` joins the thread before a build forks its workers. Measured:
docs/benchmarks.md, "The command's head start".

A stdlib-only leaf: importing it costs nothing, and it owns ``cache_root``,
packer's record folder, for the records under packer/tokenize/backend/.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading

FOLDER = "head-start"  # under cache_root(): <key>.json {"chars"} and <key>.tokenizer.json
_JOB: dict = {}  # "job": (tokenizer JSON, thread, [fastokens' tokenizer or its exception]); "begun": the JSON the
# head start loaded; "loaded": the JSON fastokens' backend loaded


def cache_root() -> str | None:
    """packer's record folder (``PACKER_CACHE``, default ~/.cache/packer); None when turned off."""
    root = os.environ.get("PACKER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "packer")
    return None if root == "off" else root


def _paths(spec: str) -> tuple[str, str] | None:
    """(record, tokenizer JSON) paths for ``--tokenizer spec`` (by its real path), or None when records are off."""
    root = cache_root()
    if root is None:
        return None
    key = hashlib.sha256(os.path.realpath(spec).encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return os.path.join(root, FOLDER, key + ".json"), os.path.join(root, FOLDER, key + ".tokenizer.json")


def loaded(tokenizer_json: str) -> None:
    """fastokens' backend loaded ``tokenizer_json`` in this process: ``remember`` keeps it."""
    _JOB["loaded"] = tokenizer_json


def remember(spec: str | None) -> None:
    """Keep the JSON fastokens loaded in this build (``loaded``) for the next with ``--tokenizer spec``.
    Best effort: no error where the folder cannot be written. Nothing written where the head start
    began with that very JSON (the record already holds it). Where the head start began and fastokens
    never loaded (another encoder ran: gigatoken alone, tiktoken, HF), the record is removed: the next
    build does not spend a load on it again."""
    text = _JOB.pop("loaded", None)
    if text is None and _JOB.pop("begun", None) is not None and spec is not None:
        for path in _paths(spec) or ():
            try:
                os.remove(path)
            except OSError:
                pass
        return
    paths = _paths(spec) if spec is not None and text is not None and text != _JOB.get("begun") else None
    if paths is None:
        return
    try:
        os.makedirs(os.path.dirname(paths[0]), exist_ok=True)
        _write(paths[1], text.encode("utf-8"))
        _write(paths[0], json.dumps({"chars": len(text)}).encode())
    except OSError:
        pass


def begin(argv: list[str]) -> None:
    """From the command line of ``packer``: start fastokens' load of the JSON the last build with this
    ``--tokenizer`` ran, when this is a build that may run it too. Never raises."""
    try:
        spec = _build_tokenizer(argv)
        if spec is None or os.environ.get("PACKER_FASTOKENS") == "off":
            return
        paths = _paths(spec)
        rec = _record(paths[0]) if paths else {}
        chars = rec.get("chars")
        # Sized before it is read: a record replaced by something else (a huge file) costs a stat, not a read.
        if not isinstance(chars, int) or not chars <= os.path.getsize(paths[1]) <= 4 * chars:
            return
        with open(paths[1], encoding="utf-8", newline="") as f:
            text = f.read()
        if len(text) == chars:
            start(text)
    except Exception:  # a head start is only ever a saving
        pass


def start(tokenizer_json: str) -> None:
    """Load ``tokenizer_json`` with fastokens in a thread (no-op where fastokens is not installed)."""
    os.environ.setdefault("FASTOKENS_BPE_THREADS", "1")  # before fastokens starts its pool (as fastokens_backend)
    try:
        import fastokens  # noqa: F401
    except Exception:
        return
    _JOB["job"] = load_in_thread(tokenizer_json, "packer-head-start")
    _JOB["begun"] = tokenizer_json


def load_in_thread(tokenizer_json: str, name: str) -> tuple:
    """fastokens' load of ``tokenizer_json`` begun in a daemon thread ``name`` (fastokens imported):
    (tokenizer_json, the thread, a list that receives the tokenizer, or the exception to raise where
    it is taken, as a load in place would)."""
    import fastokens

    box: list = []

    def load() -> None:
        try:
            box.append(fastokens.Tokenizer.from_json_str(tokenizer_json))
        except BaseException as e:  # (a Rust panic is a BaseException): kept, never a thread's traceback
            box.append(e)

    thread = threading.Thread(target=load, name=name, daemon=True)
    thread.start()
    return tokenizer_json, thread, box


def take():
    """The head start's (tokenizer JSON, thread, box), handed over once; None where there is none."""
    return _JOB.pop("job", None)


def settle() -> None:
    """Join a head start that nothing took, and drop it: the build has chosen its backend and forks its
    workers next (no thread may run at a fork, and no worker needs an unused tokenizer)."""
    job = _JOB.pop("job", None)
    if job is not None:
        job[1].join()


def _build_tokenizer(argv: list[str]) -> str | None:
    """``--tokenizer``'s value when ``argv`` is a build that may run fastokens, else None."""
    if not argv or argv[0] != "build":
        return None
    spec = None
    for i, a in enumerate(argv):
        name, eq, value = a.partition("=")
        if eq == "" and i + 1 < len(argv):
            value = argv[i + 1]
        if name == "--tokenizer":
            spec = value
        elif name == "--tokenizer-backend" and value != "auto":
            return None  # hf or tiktoken, asked for
        elif name in ("--chat", "--dry-run", "--help", "-h"):
            return None
    return spec


def _record(path: str) -> dict:
    try:
        if os.path.getsize(path) > 4096:  # a record is a few bytes
            return {}
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        os.unlink(tmp)
        raise
