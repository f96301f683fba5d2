"""Phone photos: the EXIF orientation tag is applied, so images come out as a viewer shows them."""

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from hopsml.data import pixels


def _jpeg(orientation: int, size=(64, 32)) -> bytes:
    """A JPEG stored landscape, bright in its top-left quarter, carrying the given Orientation tag."""
    pixels = np.zeros((size[1], size[0], 3), np.uint8)
    pixels[: size[1] // 2, : size[0] // 2] = 255
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=95, exif=exif.tobytes())
    return out.getvalue()


def _bright_corner(array: np.ndarray) -> str:
    h, w = array.shape[:2]
    quarters = {"top-left": array[: h // 2, : w // 2], "top-right": array[: h // 2, w // 2:],
                "bottom-left": array[h // 2:, : w // 2], "bottom-right": array[h // 2:, w // 2:]}
    return max(quarters, key=lambda k: quarters[k].mean())


@pytest.mark.parametrize("tag", range(1, 9))
def test_orientation_is_applied_as_pillow_exif_transpose_does(tag):
    data = _jpeg(tag)
    expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    got = pixels.transform(data, resize=None, crop=None)
    assert got.shape == expected.shape
    assert _bright_corner(got) == _bright_corner(expected)
    assert np.abs(got.astype(int) - expected.astype(int)).mean() < 1


def test_a_photo_turned_by_90_degrees_keeps_the_asked_size_and_comes_out_upright():
    data = _jpeg(6, size=(400, 200))           # stored landscape, shown portrait (turned clockwise)
    got = pixels.transform(data, resize=(50, 100), crop=(40, 80))   # draft decoding on this path
    assert got.shape == (80, 40, 3)
    assert _bright_corner(got) == "top-right"
    assert pixels.inspect(data)[:2] == (200, 400)
