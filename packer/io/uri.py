"""URIs and the pyarrow/fsspec filesystems behind them.

A path with a scheme (``s3://bucket/corpus/``) is a URI; anything else is a
local path. Filesystems come from ``pyarrow.fs.FileSystem.from_uri`` (s3, gs,
hdfs, file), or from fsspec (``pyarrow.fs.PyFileSystem(FSSpecHandler(...))``)
for a scheme pyarrow does not know, where fsspec and that scheme's package
are installed. Credentials and endpoints come from the environment, the usual
way for each store (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``, an instance role,
``GOOGLE_APPLICATION_CREDENTIALS``, ...). A URI holding a user, a password or
a query is refused: packer records input URIs in the manifest and names them
in messages, so nothing secret may be in them.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import urlsplit

from ..errors import PackerError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


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
    """``rel`` ("/"-separated) below the URI ``base``."""
    return base.rstrip("/") + "/" + rel if rel else base


def first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


# Filesystems, one per scheme and bucket/host per process (they hold
# connection pools; a Ray worker or DataLoader worker makes its own).
_fs_cache: dict = {}
_fs_lock = threading.Lock()


def filesystem(uri: str):
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
            raise PackerError(f"{redact(uri)}: cannot open the store ({first_line(e)})") from None
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
        raise PackerError(f"{scheme}://: no filesystem for this scheme ({first_line(e)})") from None
    return ("fsspec", PyFileSystem(FSSpecHandler(f)), f)
