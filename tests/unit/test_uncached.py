"""Files written around the page cache hold exactly the bytes written, whatever the write sizes."""

from __future__ import annotations

import errno
import os
import random

import pytest

from hopsml.data import uncached
from hopsml.data.uncached import UncachedFile, open_uncached

BUFFER = 64 << 10   # small buffers: many hand-offs to the background writer in a small file


@pytest.mark.parametrize("total", [0, 1, 4095, 4096, 4097, BUFFER, BUFFER + 5, 3 * BUFFER + 4096, 1_000_003])
def test_bytes_on_disk_are_the_bytes_written(tmp_path, total):
    data = os.urandom(total)
    sizes = random.Random(total).choices([1, 7, 4096, 5000, BUFFER, 2 * BUFFER + 3], k=10_000)
    path = str(tmp_path / "out.bin")
    with UncachedFile(path, buffer_bytes=BUFFER) as out:
        at = 0
        for size in sizes:
            if at >= total:
                break
            assert out.write(memoryview(data)[at:at + size]) == len(data[at:at + size])
            at += size
        assert out.tell() == total
    assert out.closed
    with open(path, "rb") as written:
        assert written.read() == data


def test_a_filesystem_without_direct_io_is_written_through_the_cache(tmp_path, monkeypatch):
    real_open = os.open

    def no_direct(path, flags, mode=0o777):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(uncached.os, "open", no_direct)
    data = os.urandom(3 * BUFFER + 11)
    path = str(tmp_path / "out.bin")
    with UncachedFile(path, buffer_bytes=BUFFER) as out:
        assert not out.direct
        out.write(data)
    with open(path, "rb") as written:
        assert written.read() == data


def test_a_failed_background_write_is_raised(tmp_path):
    out = UncachedFile(str(tmp_path / "out.bin"), buffer_bytes=BUFFER)
    os.close(out._fd)
    out._fd = os.open(os.devnull, os.O_RDONLY)   # a descriptor that refuses every write
    with pytest.raises(OSError):
        out.write(b"x" * (3 * BUFFER))   # the second full buffer waits for the first, which failed
    with pytest.raises(OSError):
        out.close()                      # the rest fails too, and the file is closed all the same
    assert out.closed


def test_reused_buffers_are_clean_of_the_last_file(tmp_path):
    first, second = str(tmp_path / "a.bin"), str(tmp_path / "b.bin")
    with open_uncached(first) as out:
        out.write(b"\xff" * (uncached.ALIGN * 3 + 17))
    with open_uncached(second) as out:
        out.write(b"ab")
    with open(second, "rb") as written:
        assert written.read() == b"ab"
