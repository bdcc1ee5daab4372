"""packer/io/readahead.py: a file read with several reads in flight gives its bytes, in order, once."""

from __future__ import annotations

import gzip
import os
import threading

import pytest

from packer.io.readahead import ReadAhead, open_stream


@pytest.fixture
def blob(tmp_path):
    data = os.urandom(3 << 20) + b"end"
    p = tmp_path / "blob.bin"
    p.write_bytes(data)
    return str(p), data


@pytest.mark.parametrize("block,depth", [(4 << 20, 4), (1 << 16, 1), (12345, 3)])
def test_every_byte_in_order_whatever_the_block_and_depth(blob, block, depth):
    path, data = blob
    seen = []
    with ReadAhead(path, block=block, depth=depth, on_bytes=seen.append) as f:
        got = b"".join(iter(lambda: f.read(100_000), b""))
    assert got == data
    assert sum(seen) == len(data)  # every byte counted once as it arrives


def test_a_read_from_an_offset_with_a_limit_still_reads_to_the_end(blob):
    path, data = blob
    start = 1_000_003
    with ReadAhead(path, start=start, limit=1000) as f:
        assert f.read(500) == data[start:start + 500]
        assert f.readall() == data[start + 500:]  # past the limit: small blocks, nothing skipped


def test_a_file_that_shrinks_while_read_ends_where_it_ends(blob):
    path, data = blob
    f = ReadAhead(path, block=1 << 16, depth=2)
    try:
        first = f.read(1000)
        os.truncate(path, 200_000)
        rest = f.readall()
    finally:
        f.close()
    got = first + rest
    assert data.startswith(got) and 200_000 <= len(got) < len(data)


def _fds_on(path: str) -> int:
    fds = "/proc/self/fd"
    return sum(1 for n in os.listdir(fds) if os.path.realpath(os.path.join(fds, n)) == os.path.realpath(path))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_an_early_close_lets_go_of_the_file_once_its_reads_return(blob):
    path, _ = blob
    f = ReadAhead(path, block=1 << 16, depth=4)
    assert _fds_on(path) == 1
    f.read(10)  # reads are in flight now
    f.close()
    assert f.closed
    for _ in range(500):  # the last read still running closes the file when it returns
        if _fds_on(path) == 0:
            break
        threading.Event().wait(0.01)
    assert _fds_on(path) == 0


def test_open_stream_decompresses(tmp_path):
    text = b"".join(b'{"text": "line %d"}\n' % i for i in range(20000))
    p = tmp_path / "a.jsonl.gz"
    p.write_bytes(gzip.compress(text))
    with open_stream(str(p), "gzip") as f:
        assert f.read() == text
    with open_stream(str(p), None, start=2) as f:
        assert f.read() == p.read_bytes()[2:]


@pytest.mark.parametrize("start,limit", [(0, 1 << 20), (12345, 1 << 20), ((3 << 20) - 100, 4 << 20), (5, 1)])
def test_a_small_local_range_is_read_in_this_thread_with_the_same_bytes(blob, start, limit):
    """A range up to DIRECT_MAX (a pool worker's 1 MB jsonl span) starts no thread pool, and gives the
    bytes from ``start`` to the file's end, every one counted once, as the pooled reads do."""
    path, data = blob
    before = threading.active_count()
    seen = []
    with ReadAhead(path, start, limit, on_bytes=seen.append) as f:
        assert threading.active_count() == before
        got = b"".join(iter(lambda: f.read(70_000), b""))
    assert got == data[start:] and sum(seen) == len(data) - start
    with ReadAhead(path, start, 5 << 20) as f:  # over DIRECT_MAX: the pooled reads, the same bytes
        assert f.read() == data[start:]
