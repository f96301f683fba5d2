"""An image file is read whole only once its header shows an image of an acceptable size."""

import io

import numpy as np
import pytest

from hopsml.data import pixels
from hopsml.data.images import UNREADABLE_FILE, _SourceFiles

GIB = 1 << 30


class _Counting(io.RawIOBase):
    """A file that counts the bytes read from it."""

    def __init__(self, handle):
        super().__init__()
        self.handle, self.read_bytes = handle, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=0):
        return self.handle.seek(offset, whence)

    def tell(self):
        return self.handle.tell()

    def readinto(self, buffer):
        chunk = self.handle.read(len(buffer))
        buffer[:len(chunk)] = chunk
        self.read_bytes += len(chunk)
        return len(chunk)

    def fileno(self):
        return self.handle.fileno()

    def close(self):
        self.handle.close()
        super().close()


class _CountingFiles(_SourceFiles):
    def __init__(self):
        super().__init__("/")
        self.opened = []

    def open(self, path):
        counting = _Counting(super().open(path))
        self.opened.append(counting)
        return counting


def _sparse(path, size, head=b""):
    with open(path, "wb") as out:
        out.write(head)
        out.truncate(size)   # a hole: no disk used, reads give zeros
    return "file:" + str(path)


def _reject(files, path, max_bytes=256 << 20):
    with pytest.raises(pixels.ImageRejected) as info:
        files.load(path, max_bytes)
    return info.value


def test_a_huge_file_that_is_not_an_image_is_rejected_from_its_first_bytes(tmp_path):
    files = _CountingFiles()
    rejected = _reject(files, _sparse(tmp_path / "zeros.png", 2 * GIB))
    assert rejected.reason == pixels.NOT_AN_IMAGE
    assert files.opened[0].read_bytes <= pixels.HEADER_BYTES
    assert files.opened[0].closed


def test_a_huge_file_with_an_image_header_is_rejected_by_its_size_unread(tmp_path):
    small = pixels.encode_png(np.zeros((4, 4, 3), np.uint8))
    files = _CountingFiles()
    rejected = _reject(files, _sparse(tmp_path / "huge.png", 2 * GIB, small))
    assert rejected.reason == pixels.TOO_LARGE and f"{2 * GIB} bytes" in rejected.detail
    assert files.opened[0].read_bytes < 1 << 20


def test_a_header_that_never_ends_is_read_up_to_the_cap_only(tmp_path):
    # A JPEG start followed by metadata segments (64 KiB each) past the header budget.
    segment = b"\xff\xef" + (65535).to_bytes(2, "big") + bytes(65533)
    count = pixels.HEADER_BYTES // len(segment) + 8
    files = _CountingFiles()
    path = _sparse(tmp_path / "endless.jpg", 2 * GIB, b"\xff\xd8" + segment * count)
    rejected = _reject(files, path, 4 * GIB)
    assert rejected.reason == pixels.CORRUPT_IMAGE and "no image header" in rejected.detail
    assert files.opened[0].read_bytes <= pixels.HEADER_BYTES


def test_an_image_within_the_limit_is_read_once_whole(tmp_path):
    data = pixels.encode_png(np.arange(48, dtype=np.uint8).reshape(4, 4, 3))
    (tmp_path / "ok.png").write_bytes(data)
    files = _CountingFiles()
    header, read = files.load("file:" + str(tmp_path / "ok.png"), len(data))
    assert header == (4, 4, "RGB", "PNG") and read == data
    assert len(data) <= files.opened[0].read_bytes <= 2 * len(data) + (64 << 10)


def test_empty_and_missing_files_keep_their_reasons(tmp_path):
    (tmp_path / "empty.png").write_bytes(b"")
    files = _CountingFiles()
    assert _reject(files, "file:" + str(tmp_path / "empty.png")).reason == pixels.EMPTY_FILE
    assert _reject(files, "file:" + str(tmp_path / "gone.png")).reason == UNREADABLE_FILE
