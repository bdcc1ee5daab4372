"""Storage: inputs and build folders on object storage (s3://, gs://, hdfs://, ...).

A path with a scheme (``s3://bucket/corpus/``) is a URI; anything else is a
local path and never reaches this module's remote code, so local builds keep
their own fast path (``os.pread`` read-ahead, temp file + fsync + rename).

Filesystems come from ``pyarrow.fs.FileSystem.from_uri`` (s3, gs, hdfs,
file), or from fsspec (``pyarrow.fs.PyFileSystem(FSSpecHandler(...))``) for a
scheme pyarrow does not know, where fsspec and that scheme's package are
installed. Credentials and endpoints come from the environment, the usual
way for each store (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``, an instance
role, ``GOOGLE_APPLICATION_CREDENTIALS``, ...). A URI holding a user, a
password or a query is refused: packer records input URIs in the manifest
and names them in messages, so nothing secret may be in them.

Publication on an object store: there is no rename, but one PUT is atomic
per object (a reader sees the whole object or none; a multipart upload shows
nothing until it completes). So every object is written whole, in one
upload, a unit's record after its shard and the manifest last: the
manifest's presence still means the build is complete.
"""

from __future__ import annotations

import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote, urlsplit

from .errors import PackerError, ShardError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
LIST_THREADS = 32  # concurrent small GETs (unit records) when resuming on an object store


def is_uri(path) -> bool:
    """True for ``scheme://...`` (file:// included); False for a local path."""
    return isinstance(path, str) and _SCHEME.match(path) is not None


def redact(uri: str) -> str:
    """``uri`` without user, password, query or fragment: safe to show or record."""
    if not is_uri(uri):
        return uri
    u = urlsplit(uri)
    host = u.hostname or ""
    if u.port:
        host += f":{u.port}"
    return f"{u.scheme}://{host}{u.path}"


def check_uri(uri: str) -> str:
    """Refuse a URI that carries secrets or options; return it unchanged."""
    u = urlsplit(uri)
    if u.username or u.password or u.query or u.fragment:
        raise PackerError(
            f"{redact(uri)}: give storage credentials and options through the environment "
            "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, ...), not in the URI: "
            "packer records input URIs in the manifest"
        )
    return uri


def join(base: str, rel: str) -> str:
    return base.rstrip("/") + "/" + rel if rel else base


# --------------------------------------------------------------------------
# Filesystems, one per scheme and bucket/host per process (they hold
# connection pools; a Ray worker or DataLoader worker makes its own).

_fs_cache: dict = {}
_fs_lock = threading.Lock()


def resolve(uri: str):
    """(pyarrow FileSystem, path within it) for ``uri``."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    check_uri(uri)
    u = urlsplit(uri)
    scheme = u.scheme.lower()
    key = (scheme, u.netloc)
    with _fs_lock:
        hit = _fs_cache.get(key)
    if hit is None:
        try:
            fs, root = pafs.FileSystem.from_uri(f"{scheme}://{u.netloc}/")
            hit = ("arrow", fs, root)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
            hit = _fsspec(scheme)
        except OSError as e:
            raise PackerError(f"{redact(uri)}: cannot open the store ({_first_line(e)})") from None
        with _fs_lock:
            _fs_cache[key] = hit
    kind, fs, root = hit
    if kind == "fsspec":
        return fs, root._strip_protocol(uri)
    rest = u.path.lstrip("/")
    return fs, (root.rstrip("/") + "/" + rest if rest else root.rstrip("/") or "/")


def _fsspec(scheme: str):
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem
    except ImportError:
        raise PackerError(
            f"{scheme}:// is not a scheme pyarrow knows, and fsspec is not installed (pip install fsspec "
            "and the package for that store)"
        ) from None
    try:
        f = fsspec.filesystem(scheme)
    except (ImportError, ValueError) as e:
        raise PackerError(f"{scheme}://: no filesystem for this scheme ({_first_line(e)})") from None
    return ("fsspec", PyFileSystem(FSSpecHandler(f)), f)


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def _io_error(what: str, uri: str, e: BaseException) -> PackerError:
    return PackerError(f"cannot {what} {redact(uri)}: {_first_line(e)}")


# --------------------------------------------------------------------------
# Reading inputs.


class RemoteFile:
    """A remote object opened for ranged reads: ``pread(n, offset)`` is safe
    from many threads at once (each call is one ranged GET), which is what
    ``sources.ReadAhead`` runs on its read-ahead threads."""

    def __init__(self, uri: str):
        fs, path = resolve(uri)
        self._f = fs.open_input_file(path)  # one HEAD for the size; reads are ranged GETs
        self.size = self._f.size()

    def pread(self, n: int, offset: int) -> bytes:
        return self._f.read_at(n, offset)

    def close(self) -> None:
        self._f.close()


def open_input(uri: str):
    """A pyarrow random-access file over ``uri`` (what pyarrow.parquet takes)."""
    fs, path = resolve(uri)
    return fs.open_input_file(path)


def read_bytes(uri: str) -> bytes:
    """The whole object (one GET). Raises OSError, as ``open().read()`` would."""
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        return f.read()


def open_read(uri: str):
    """A buffered, sequential binary reader over ``uri``."""
    fs, path = resolve(uri)
    return fs.open_input_stream(path, buffer_size=8 << 20)


def source(path: str):
    """What ``pyarrow.parquet.ParquetFile`` should be given for ``path``."""
    return open_input(path) if is_uri(path) else path


def discover(paths: list[str], exclude: str | None = None, on_sized=None):
    """``sources.discover`` for paths that may include URIs, in the order given.

    A URI naming an object is one input file; a URI naming a prefix holds
    every object below it (recursively; sorted as a local tree is sorted;
    names starting with "." skipped). Globs are not expanded on object storage.
    """
    from . import sources

    files, ignored, dups, seen = [], [], [], set()
    local_exclude = exclude if exclude and not is_uri(exclude) else None
    for p in paths:
        if not is_uri(p):
            d = sources.discover([p], exclude=local_exclude, on_sized=on_sized)
            found = list(d.files)
            ignored.extend(d.ignored)
        else:
            found = _discover_uri(p, exclude if exclude and is_uri(exclude) else None, ignored)
        for f in found:
            key = f.path if is_uri(f.path) else os.path.realpath(f.path)
            if key in seen:
                dups.append(f.path)
                continue
            seen.add(key)
            files.append(f)
    return sources.Discovery(tuple(files), tuple(ignored), tuple(dups))


def _discover_uri(uri: str, exclude: str | None, ignored: list[str]):
    import pyarrow.fs as pafs

    from .sources import FORMATS, InputFile, detect_format

    if any(ch in uri for ch in "*?["):
        raise PackerError(f"input globs are not expanded on object storage: {redact(uri)}; name a prefix instead")
    fs, path = resolve(uri)
    try:
        info = fs.get_file_info(path)
    except OSError as e:
        raise _io_error("list", uri, e) from None
    if info.type == pafs.FileType.File:
        fmt = detect_format(uri)
        if fmt is None:
            raise PackerError(f"unknown input format: {uri} (supported: {', '.join(sorted(FORMATS))})")
        return [InputFile(uri, fmt[0], fmt[1], info.size)]
    if info.type != pafs.FileType.Directory:
        raise PackerError(f"input not found: {uri}")
    try:
        listing = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    except OSError as e:
        raise _io_error("list", uri, e) from None
    base = path.rstrip("/")
    ex = exclude.rstrip("/") + "/" if exclude else None
    out = []
    for i in listing:
        if i.type != pafs.FileType.File:
            continue
        rel = i.path[len(base):].lstrip("/")
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        full = join(uri, rel)
        if ex is not None and (full + "/").startswith(ex):
            continue
        fmt = detect_format(full)
        if fmt is None:
            ignored.append(full)
        else:
            out.append(InputFile(full, fmt[0], fmt[1], i.size))
    return sorted(out, key=lambda f: f.path.split("/"))  # as a local tree is sorted: a/sub/x before b


# --------------------------------------------------------------------------
# The build folder: ``out`` is a local folder or a URI prefix; ``rel`` a
# "/"-separated path inside it (shards/000001.arrow).


def json_bytes(obj) -> bytes:
    """JSON as ``shards.write_json`` writes it (so both stores hold the same bytes)."""
    return (json.dumps(obj, indent=1, sort_keys=False) + "\n").encode()


def put(out: str, rel: str, data) -> None:
    """Publish ``data`` (bytes or a ``pa.Buffer``) at ``out/rel`` atomically: a reader sees all of it or nothing."""
    if not is_uri(out) or urlsplit(out).scheme.lower() == "file":
        from . import shards as S

        # A local disk (file:// too: pyarrow's local filesystem writes in
        # place): temp file, fsync, rename.
        if not is_uri(out):
            S.atomic_write(os.path.join(out, *rel.split("/")), data)
            return
        path = os.path.join(unquote(urlsplit(out).path), *rel.split("/"))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)  # folders appear with their first object, as on a store
        except OSError as e:
            raise PackerError(f"cannot write to output folder {out}: {e.strerror}") from None
        S.atomic_write(path, data)
        return
    uri = join(out, rel)
    fs, path = resolve(uri)
    try:
        # One object, written whole: a single PUT, or a multipart upload that
        # shows nothing until it completes.
        with fs.open_output_stream(path) as f:
            f.write(data)
    except OSError as e:
        raise PackerError(f"cannot write {uri}: {_first_line(e)}; nothing partial was kept: "
                          "fix the cause and rerun with --resume") from None


def put_json(out: str, rel: str, obj) -> None:
    if not is_uri(out):
        from . import shards as S

        S.write_json(os.path.join(out, *rel.split("/")), obj)  # the local path, as it always was
    else:
        put(out, rel, json_bytes(obj))


def get(out: str, rel: str) -> bytes:
    """The bytes at ``out/rel``; FileNotFoundError if absent."""
    if not is_uri(out):
        with open(os.path.join(out, *rel.split("/")), "rb") as f:
            return f.read()
    return read_bytes(join(out, rel))


def listing(out: str) -> dict[str, int]:
    """Every object under the prefix ``out``: {rel: size}. {} if none."""
    import pyarrow.fs as pafs

    fs, path = resolve(out)
    try:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return {}
        if info.type == pafs.FileType.File:
            raise PackerError(f"output {out} exists and is not a folder")
        entries = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    except OSError as e:
        raise _io_error("list", out, e) from None
    base = path.rstrip("/")
    return {i.path[len(base):].lstrip("/"): i.size for i in entries if i.type == pafs.FileType.File}


def delete(out: str, rels: list[str]) -> None:
    fs, path = resolve(out)
    base = path.rstrip("/")
    try:
        for rel in rels:
            fs.delete_file(base + "/" + rel)
    except OSError as e:
        raise _io_error("delete in", out, e) from None


# --------------------------------------------------------------------------
# The parts of a build that touch the build folder (build.py calls these for
# a URI; local folders keep build._prepare_out and build._finished).


def read_manifest(out: str) -> dict:
    """``shards.read_manifest`` for a local folder or a URI prefix."""
    from . import shards as S

    if not is_uri(out):
        return S.read_manifest(out)
    uri = join(out, S.MANIFEST)
    try:
        data = read_bytes(uri)
    except FileNotFoundError:
        if any(k.startswith(S.UNIT_DIR + "/") for k in listing(out)):
            raise ShardError(f"{out}: build is unfinished (no {S.MANIFEST}); run packer build again with --resume") from None
        raise ShardError(f"{out}: not a packer build (no {S.MANIFEST})") from None
    except OSError as e:
        raise ShardError(f"{uri}: unreadable manifest ({_first_line(e)})") from None
    try:
        m = json.loads(data)
    except ValueError as e:
        raise ShardError(f"{uri}: unreadable manifest ({e})") from None
    if not isinstance(m, dict) or m.get("format") != S.FORMAT_NAME:
        raise ShardError(f"{uri}: not a packer manifest")
    if m.get("format_version") != S.FORMAT_VERSION:
        raise ShardError(f"{uri}: format version {m.get('format_version')} is not supported "
                         f"(this packer reads version {S.FORMAT_VERSION})")
    for key in ("seq_len", "dtype", "shards", "tokenizer", "totals"):
        if key not in m:
            raise ShardError(f"{uri}: manifest lacks {key!r}")
    return m


def out_action(out: str, tops: list[str], cfg, settings: dict, old_settings) -> str:
    """What a build does with output location ``out``, whose top-level names are ``tops``.

    The rules of ``--resume`` and ``--overwrite``, shared by local folders
    (``build._prepare_out``) and URI prefixes (``prepare_out``). Returns
    "done" (resume: a finished build with the same settings), "continue"
    (resume it), "replace" (overwrite: delete ``tops``) or "fresh";
    raises PackerError with the one-line reason otherwise. ``old_settings()``
    reads the settings in the old build.json, only when needed.
    """
    from . import shards as S

    ours = {S.MANIFEST, "build.json", S.SHARD_DIR, S.UNIT_DIR}
    if cfg.resume and "build.json" not in tops and all(t in ours or t.startswith(".tmp-") for t in tops):
        return "fresh"  # killed before build.json was written: nothing to keep, start afresh
    if not tops:
        return "fresh"
    if cfg.resume:
        if "build.json" not in tops:
            raise PackerError(f"cannot resume: {out} holds no packer build (no build.json)")
        old = old_settings()
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            k = diff[0]
            what = "input files changed" if k == "input_plan" else f"{k} was {old.get(k)!r}, now {settings[k]!r}"
            raise PackerError(f"cannot resume {out}: it was built with other settings ({what}); use --overwrite or another folder")
        return "done" if S.MANIFEST in tops else "continue"
    if cfg.overwrite:
        foreign = [t for t in tops if t not in ours]
        if foreign:
            raise PackerError(
                f"refusing to overwrite {out}: it holds files packer did not write ({', '.join(foreign[:3])}); choose another folder"
            )
        return "replace"
    raise PackerError(f"output folder {out} is not empty: pass --resume to continue a build there, or --overwrite to replace it")


def prepare_out(cfg, settings: dict) -> bool:
    """``build._prepare_out`` for a URI prefix: same rules, same messages.

    Returns True if ``out`` already holds a finished, matching build. There
    are no temp objects to clean (objects are published whole); --overwrite
    deletes the manifest first, so no reader sees a manifest without shards.
    """
    from . import shards as S

    out = cfg.out
    objects = listing(out)
    tops = sorted({k.split("/", 1)[0] for k in objects if not k.rsplit("/", 1)[-1].startswith(".tmp-")})
    action = out_action(out, tops, cfg, settings, lambda: json.loads(get(out, "build.json")).get("settings", {}))
    if action == "done":
        return True
    if action == "replace":
        keys = sorted(objects, key=lambda k: k != S.MANIFEST)  # the manifest goes first
        delete(out, keys)
        objects = {}
    stale = [k for k in objects if k.rsplit("/", 1)[-1].startswith(".tmp-")]  # file://: a killed build's temp files
    if stale:
        delete(out, stale)
    if "build.json" not in objects:
        put_json(out, "build.json", {"format": S.FORMAT_NAME, "format_version": S.FORMAT_VERSION, "settings": settings})
    return False


def finished_records(out: str, units) -> dict[int, dict]:
    """{unit index: record} for every unit whose record and whole shard are in ``out``.

    One listing of the prefix, then the records (small GETs) from
    LIST_THREADS threads: a resume over 100k units must not pay 100k round
    trips in series.
    """
    from . import shards as S

    objects = listing(out)
    want = [u.index for u in units if f"{S.UNIT_DIR}/{u.index:06d}.json" in objects]

    def load(i: int):
        try:
            rec = json.loads(get(out, f"{S.UNIT_DIR}/{i:06d}.json"))
            if objects.get(rec["path"]) == rec["bytes"]:
                return i, rec
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return i, None

    with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="packer-resume") as pool:
        return {i: rec for i, rec in pool.map(load, want) if rec is not None}
