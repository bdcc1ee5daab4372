"""Storage: where inputs are read from and builds are written to (local folders, object stores).

The only part of packer that knows local from remote: ``storage_for(path)``
decides once and returns a ``Storage``; ``find`` discovers input files;
``open_stream`` reads one with read-ahead and decompression; ``ShardCache``
keeps local copies of remote shards for training.
"""

from .cache import ShardCache
from .cpus import CpuLimit, cpu_limit
from .lock import LOCK_NAME, OutLock, describe_holder
from .memory import memory_limit
from .stamp import digest as stamp_digest, first_change, listing as stamp_listing
from .object_lock import LEASE_THREAD
from .compression import SUFFIXES as COMPRESSION_SUFFIXES, decompress_all, expanded_length, truncation_errors
from .discover import Found, find
from .readahead import READ_BLOCK, READ_DEPTH, ReadAhead, io_thread, open_stream
from .atomic import atomic_write, json_bytes, write_json
from .object_storage import ObjectStorage
from .regular import open_regular
from .storage import LocalStorage, storage_for
from .storage_base import RangedFile, Storage
from .uri import check_uri, first_line, is_uri, redact

__all__ = [
    "Storage", "LocalStorage", "ObjectStorage", "RangedFile", "storage_for", "atomic_write", "json_bytes", "write_json",
    "find", "Found", "ReadAhead", "open_stream", "io_thread", "READ_BLOCK", "READ_DEPTH", "truncation_errors", "decompress_all", "expanded_length", "COMPRESSION_SUFFIXES",
    "ShardCache", "is_uri", "redact", "check_uri", "open_regular", "first_line", "CpuLimit", "cpu_limit", "memory_limit",
    "LOCK_NAME", "OutLock", "describe_holder", "LEASE_THREAD", "stamp_digest", "first_change", "stamp_listing",
]
