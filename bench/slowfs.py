"""A slow mount for benchmarks: a read-only FUSE passthrough with per-read
latency and a bandwidth cap, to stand in for a network or cloud mount.

    # needs: apt-get install -y fuse libfuse2 && pip install fusepy   (root, /dev/fuse)
    python bench/slowfs.py SRC MNT --latency-ms 5 --mbps 4 &     # serve SRC at MNT
    ...                                                          # read MNT/...
    fusermount -u MNT                                            # stop

Every read request the kernel sends (up to 128 KB each) waits
``--latency-ms``, then takes its share of a bandwidth budget of ``--mbps``
MB/s shared by all requests (a token bucket). Requests are served by many
threads, so concurrent reads overlap their latency, as on a real network
mount. Metadata calls (lookup, stat, open, listing) wait
``--meta-latency-ms`` (default 0): with fusepy over libfuse2 the kernel runs
lookups in one folder one at a time (no parallel directory operations), so
a metadata latency here would serialise what NFS or SMB answer in parallel.
The page cache is dropped at every open (FUSE's default), so a second run
pays the same costs as the first.

``SlowMount`` is the same thing as a context manager, for bench scripts.
"""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
import threading
import time


class _Bucket:
    """Bandwidth cap shared by all threads: each read reserves len/rate seconds of the link."""

    def __init__(self, bytes_per_s: float):
        self.rate = bytes_per_s
        self.free_at = 0.0
        self.lock = threading.Lock()

    def take(self, n: int) -> None:
        if self.rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.free_at)
            self.free_at = start + n / self.rate
            wait = self.free_at - now
        time.sleep(wait)


def make_ops(root: str, latency_s: float, bytes_per_s: float, meta_latency_s: float = 0.0):
    from fuse import FuseOSError, Operations

    bucket = _Bucket(bytes_per_s)

    class SlowPassthrough(Operations):
        def _full(self, path):
            return os.path.join(root, path.lstrip("/"))

        def _wait(self):  # metadata calls
            if meta_latency_s > 0:
                time.sleep(meta_latency_s)

        def getattr(self, path, fh=None):
            self._wait()
            try:
                st = os.lstat(self._full(path))
            except OSError as e:
                raise FuseOSError(e.errno) from None
            keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")
            return {k: getattr(st, k) for k in keys}

        def readdir(self, path, fh):
            # Entries carry their type (as NFS and most network file systems
            # give), so a tree walk does not stat every file to find folders.
            self._wait()
            out = [".", ".."]
            with os.scandir(self._full(path)) as it:
                for e in it:
                    out.append((e.name, {"st_mode": e.stat(follow_symlinks=False).st_mode}, 0))
            return out

        def open(self, path, flags):
            self._wait()
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise FuseOSError(errno.EROFS)
            return os.open(self._full(path), os.O_RDONLY)

        def read(self, path, size, offset, fh):
            if latency_s > 0:
                time.sleep(latency_s)
            data = os.pread(fh, size, offset)
            bucket.take(len(data))
            return data

        def release(self, path, fh):
            os.close(fh)
            return 0

        def statfs(self, path):
            st = os.statvfs(self._full(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                    "f_frsize", "f_namemax")
            return {k: getattr(st, k) for k in keys}

    return SlowPassthrough()


class SlowMount:
    """``with SlowMount(src, mnt, latency_ms=5, mbps=4): ...`` serves src at mnt in a child process
    (pinned to ``cpus``, if given)."""

    def __init__(self, src: str, mnt: str, latency_ms: float, mbps: float, meta_latency_ms: float = 0.0,
                 cpus: list[int] | None = None):
        # cpus: pin the daemon (it stands in for a file server, which would not share the client's cores)
        pin = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
        self.args = pin + [sys.executable, os.path.abspath(__file__), src, mnt, "--latency-ms", str(latency_ms),
                     "--mbps", str(mbps), "--meta-latency-ms", str(meta_latency_ms)]
        self.mnt = mnt
        self.proc = None

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        self.proc = subprocess.Popen(self.args)
        deadline = time.time() + 20
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("slowfs did not mount (is /dev/fuse usable, fuse and libfuse2 installed?)")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        subprocess.run(["fusermount", "-u", self.mnt], check=False)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("mnt")
    ap.add_argument("--latency-ms", type=float, default=5.0, help="wait per read request")
    ap.add_argument("--meta-latency-ms", type=float, default=0.0, help="wait per metadata request (see above)")
    ap.add_argument("--mbps", type=float, default=0, help="bandwidth cap in MB/s (1e6 bytes); 0 = none")
    args = ap.parse_args(argv)
    from fuse import FUSE

    ops = make_ops(os.path.abspath(args.src), args.latency_ms / 1e3, args.mbps * 1e6, args.meta_latency_ms / 1e3)
    FUSE(ops, args.mnt, foreground=True, nothreads=False, ro=True)


if __name__ == "__main__":
    main()
