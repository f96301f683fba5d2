"""An image file is read whole only once its header shows an image of an acceptable size."""

import io

import numpy as np
import pytest

from hopsml.data import pixels
from hopsml.data.images import UNREADABLE_FILE
from hopsml.data.images.transformer import _SourceFiles

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
    array = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    data = pixels.encode_png(array)
    (tmp_path / "ok.png").write_bytes(data)
    files = _CountingFiles()
    image, header = files.load("file:" + str(tmp_path / "ok.png"), len(data))
    assert header == (4, 4, "RGB", "PNG") and files.opened[0].read_bytes == len(data)
    np.testing.assert_array_equal(pixels.transform(image, None), array)


def test_a_small_file_over_a_small_limit_is_rejected_by_its_size(tmp_path):
    data = pixels.encode_png(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    (tmp_path / "big.png").write_bytes(data)
    rejected = _reject(_CountingFiles(), "file:" + str(tmp_path / "big.png"), 1000)
    assert rejected.reason == pixels.TOO_LARGE and f"a file of {len(data)} bytes" in rejected.detail


def test_empty_and_missing_files_keep_their_reasons(tmp_path):
    (tmp_path / "empty.png").write_bytes(b"")
    files = _CountingFiles()
    assert _reject(files, "file:" + str(tmp_path / "empty.png")).reason == pixels.EMPTY_FILE
    assert _reject(files, "file:" + str(tmp_path / "gone.png")).reason == UNREADABLE_FILE


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 70_000, 3_000_000])
def test_the_job_s_records_are_the_bytes_encode_example_gives(size):
    from hopsml.data.images.records import ExampleTemplate
    from hopsml.formats import decode_example, encode_example

    template = ExampleTemplate(224, 200, 3, b"png", {"cat": 0, "dög": 1})
    encoded = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path = "file:/data/pets/dög/" + "x" * (size % 300) + ".jpg"
    want = encode_example({
        "image/encoded": encoded, "image/height": 224, "image/width": 200, "image/channels": 3,
        "image/format": b"png", "image/class/label": 1, "image/class/text": "dög".encode(),
        "image/filename": path.encode()})
    got = template.encode(encoded, "dög", path)
    assert got == want
    assert decode_example(got)["image/encoded"] == [encoded]
