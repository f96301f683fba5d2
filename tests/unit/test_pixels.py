"""Image decoding, conversion, resizing and cropping, compared with plain Pillow."""

from __future__ import annotations

import functools
import io

import numpy as np
import pytest
from PIL import Image

from hopsml.data.pixels import (
    REASONS,
    ImageEncodingError,
    ImageRejected,
    encode_jpeg,
    encode_png,
    inspect,
    transform,
    transform_batch,
)
from hopsml.errors import HopsmlError, SettingsError

RESIZE, CROP = (200, 200), (180, 180)


def photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A smooth RGB test picture with some texture and noise (JPEG-like content)."""
    return _photo(width, height, seed).copy()


@functools.cache
def _photo(width: int, height: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height) + 64], -1)
    base += 30 * (np.sin(x / 7.0) * np.cos(y / 11.0))[..., None]
    base += rng.normal(0, 6, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def save(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def reference(data: bytes, resize=RESIZE, crop=CROP) -> np.ndarray:
    """Plain Pillow: decode fully, make RGB (alpha onto white), resize bilinear, center-crop."""
    image = Image.open(io.BytesIO(data))
    if image.mode == "P" and "transparency" in image.info or image.mode in ("RGBA", "LA"):
        rgba = image.convert("RGBA")
        image = Image.new("RGB", image.size, (255, 255, 255))
        image.paste(rgba, mask=rgba.getchannel("A"))
    image = image.convert("RGB")
    if resize:
        image = image.resize(resize, Image.Resampling.BILINEAR)
    if crop:
        left, top = (image.width - crop[0]) // 2, (image.height - crop[1]) // 2
        image = image.crop((left, top, left + crop[0], top + crop[1]))
    return np.asarray(image)


@functools.cache
def images_in_modes(width: int, height: int) -> dict[str, Image.Image]:
    rgb = Image.fromarray(photo(width, height))
    alpha = np.tile(np.linspace(0, 255, width, dtype=np.uint8), (height, 1))
    rgba = rgb.copy()
    rgba.putalpha(Image.fromarray(alpha))
    la = rgb.convert("L")
    la.putalpha(Image.fromarray(alpha))
    palette_transparent = rgb.quantize(32)
    palette_transparent.info["transparency"] = 0
    return {
        "RGB": rgb,
        "L": rgb.convert("L"),
        "1": rgb.convert("1"),
        "P": rgb.quantize(64),
        "P+transparency": palette_transparent,
        "RGBA": rgba,
        "LA": la,
    }


# --- PNG: bit-identical to plain Pillow ------------------------------------------------------

@pytest.mark.parametrize("size", [(640, 480), (210, 190), (120, 90), (200, 200)])
@pytest.mark.parametrize("mode", ["RGB", "L", "1", "P", "P+transparency", "RGBA", "LA"])
def test_png_is_bit_identical_to_pillow(mode, size):
    data = save(images_in_modes(*size)[mode], "PNG", compress_level=1)
    got = transform(data, RESIZE, CROP)
    assert got.shape == (180, 180, 3) and got.dtype == np.uint8
    np.testing.assert_array_equal(got, reference(data))


@pytest.mark.parametrize("resize, crop", [(None, None), ((64, 48), None), (None, (50, 30)),
                                          ((321, 123), (320, 121)), ((90, 120), (89, 120))])
def test_png_resize_and_crop_options(resize, crop):
    data = save(Image.fromarray(photo(250, 170)), "PNG")
    got = transform(data, resize, crop)
    expected = reference(data, resize, crop)
    shape = crop or resize or (250, 170)
    assert got.shape == (shape[1], shape[0], 3)
    np.testing.assert_array_equal(got, expected)


def test_alpha_is_composited_onto_white():
    rgba = np.zeros((40, 40, 4), dtype=np.uint8)
    rgba[..., 0] = 255            # red, but fully transparent on the left half
    rgba[:, 20:, 3] = 255
    got = transform(encode_png(rgba), None, None)
    assert (got[:, :20] == 255).all()
    assert (got[:, 20:] == [255, 0, 0]).all()


def test_array_is_writable_and_owned():
    got = transform(encode_png(photo(50, 50)), (30, 30), (20, 20))
    assert got.flags.writeable and got.flags.c_contiguous
    got += 1


# --- other modes -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode, dtype", [("I;16", "<u2"), ("I;16B", ">u2"), ("I", "<i4")])
def test_16_bit_images_scale_to_8_bit(mode, dtype):
    values = np.linspace(0, 65535, 64 * 48).reshape(48, 64).astype(np.int64)
    image = Image.frombytes(mode, (64, 48), values.astype(dtype).tobytes())
    data = save(image, "PNG" if mode == "I;16" else "TIFF")
    assert inspect(data)[2] == mode
    got = transform(data, None, None)
    want = ((values * 255 + 32767) // 65535).astype(np.uint8)
    np.testing.assert_array_equal(got, np.repeat(want[..., None], 3, axis=2))
    assert got[0, 0, 0] == 0 and got[-1, -1, 0] == 255  # not clipped at 255 as convert('L') does


def test_cmyk_jpeg_and_tiff_are_converted():
    cmyk = Image.fromarray(photo(300, 200)).convert("CMYK")
    for data in (save(cmyk, "JPEG", quality=95), save(cmyk, "TIFF")):
        assert inspect(data)[2] == "CMYK"
        got = transform(data, RESIZE, CROP)
        expected = reference(data)
        assert got.shape == (180, 180, 3)
        np.testing.assert_array_equal(got, expected)  # no draft: 300x200 is under 2x the target


def test_float_images_are_rejected():
    image = Image.fromarray(np.ones((10, 10), dtype=np.float32))
    with pytest.raises(ImageRejected) as caught:
        transform(save(image, "TIFF"), None, None)
    assert caught.value.reason == "unsupported mode F"


# --- JPEG: draft decoding --------------------------------------------------------------------

def test_small_jpeg_matches_pillow_exactly():
    data = encode_jpeg(photo(500, 375), quality=90)
    np.testing.assert_array_equal(transform(data, RESIZE, CROP), reference(data))


@pytest.mark.parametrize("size", [(1000, 800), (1600, 1200), (2000, 1500), (400, 4000)])
def test_large_jpeg_with_draft_stays_close_to_full_decode(size):
    data = encode_jpeg(photo(*size), quality=90)
    full = reference(data)
    np.testing.assert_array_equal(transform(data, RESIZE, CROP, draft=False), full)
    drafted = transform(data, RESIZE, CROP).astype(np.int16)
    difference = np.abs(drafted - full)
    # DCT-domain downscaling then bilinear: measured mean 0.25..0.55 levels in 255, max 3
    assert difference.mean() < 1.0
    assert difference.max() <= 6


def test_grayscale_jpeg_with_draft():
    gray = Image.fromarray(photo(1200, 900)).convert("L")
    data = save(gray, "JPEG", quality=90)
    drafted = transform(data, RESIZE, CROP).astype(np.int16)
    assert drafted.shape == (180, 180, 3)
    assert (drafted[..., 0] == drafted[..., 2]).all()
    assert np.abs(drafted - reference(data)).mean() < 1.0


def test_draft_never_decodes_below_the_resize_target():
    # 399 wide is under 2x 200: a 1/2-scale decode would be 200 wide... but 799 tall allows 1/2
    # only if both directions do, so this decodes at full size and matches exactly.
    data = encode_jpeg(photo(399, 799), quality=90)
    np.testing.assert_array_equal(transform(data, RESIZE, CROP), reference(data))


# --- inspect ---------------------------------------------------------------------------------

def test_inspect_reads_the_header_only():
    data = encode_jpeg(photo(640, 480))
    assert inspect(data) == (640, 480, "RGB", "JPEG")
    assert inspect(data[:2000]) == (640, 480, "RGB", "JPEG")  # pixels not needed
    png = save(images_in_modes(30, 20)["P"], "PNG")
    assert inspect(png) == (30, 20, "P", "PNG")


# --- rejections ------------------------------------------------------------------------------

def truncated_jpeg() -> bytes:
    data = encode_jpeg(photo(300, 300))
    return data[:len(data) // 2]


def broken_png() -> bytes:
    data = bytearray(save(Image.fromarray(photo(100, 100)), "PNG"))
    data[len(data) // 2:len(data) // 2 + 64] = bytes(64)   # damage the IDAT stream
    return bytes(data)


@pytest.mark.parametrize("make, reason", [
    (lambda: b"", "empty file"),
    (lambda: None, "empty file"),
    (lambda: np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes(),
     "not an image"),
    (lambda: b"just some text, not pixels", "not an image"),
    (truncated_jpeg, "corrupt image"),
    (broken_png, "corrupt image"),
    (lambda: encode_png(photo(100, 100))[:3000], "corrupt image"),
    (lambda: encode_png(photo(100, 80)), "too small"),
])
def test_bad_input_is_rejected_with_a_reason(make, reason):
    with pytest.raises(ImageRejected) as caught:
        transform(make(), None, (120, 120))
    assert caught.value.reason == reason
    assert reason in REASONS
    assert isinstance(caught.value, HopsmlError)


def test_inspect_rejects_like_transform():
    with pytest.raises(ImageRejected, match="empty file"):
        inspect(b"")
    with pytest.raises(ImageRejected, match="not an image"):
        inspect(b"\x00" * 100)


def test_bad_settings():
    data = encode_png(photo(10, 10))
    with pytest.raises(SettingsError, match="larger than resize"):
        transform(data, (100, 100), (120, 90))
    with pytest.raises(SettingsError):
        transform(data, (0, 10), None)
    with pytest.raises(SettingsError):
        transform(data, "big", None)


def test_batch_keeps_going_past_bad_images():
    good = encode_jpeg(photo(320, 240))
    batch = [good, b"", truncated_jpeg(), None, encode_png(photo(64, 64)), b"nonsense"]
    arrays, reasons = transform_batch(batch, (64, 64), (60, 60))
    assert reasons == [None, "empty file", "corrupt image", "empty file", None, "not an image"]
    assert [a is None for a in arrays] == [r is not None for r in reasons]
    np.testing.assert_array_equal(arrays[0], transform(good, (64, 64), (60, 60)))
    assert arrays[4].shape == (60, 60, 3)


# --- encoders --------------------------------------------------------------------------------

def test_encoders_round_trip():
    rgb = photo(64, 48)
    assert inspect(encode_png(rgb)) == (64, 48, "RGB", "PNG")
    np.testing.assert_array_equal(transform(encode_png(rgb), None, None), rgb)
    gray = rgb[..., 0]
    np.testing.assert_array_equal(transform(encode_png(gray[..., None]), None, None)[..., 1], gray)
    wide = (np.arange(64 * 48, dtype=np.uint16) * 21).reshape(48, 64)
    decoded = Image.open(io.BytesIO(encode_png(wide)))
    np.testing.assert_array_equal(np.asarray(decoded), wide)
    jpeg = encode_jpeg(rgb, quality=95)
    assert inspect(jpeg)[3] == "JPEG"
    assert np.abs(transform(jpeg, None, None).astype(int) - rgb).mean() < 6  # 4:2:0 chroma
    assert inspect(encode_jpeg(gray))[2] == "L"


@pytest.mark.parametrize("array", [np.zeros((4, 4, 2), np.uint8), np.zeros((4,), np.uint8),
                                   np.zeros((4, 4, 3), np.float32)])
def test_encoders_reject_odd_arrays(array):
    with pytest.raises(ImageEncodingError, match="shape"):
        encode_png(array)


def test_jpeg_refuses_alpha_and_16_bit():
    with pytest.raises(ImageEncodingError, match="alpha"):
        encode_jpeg(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(ImageEncodingError):
        encode_jpeg(np.zeros((4, 4), np.uint16))


def test_no_crop_by_default():
    data = encode_jpeg(photo(500, 375), quality=90)
    assert transform(data, (224, 224)).shape == (224, 224, 3)
    assert transform(data, (128, 96)).shape == (96, 128, 3)
    np.testing.assert_array_equal(transform(data, (128, 96), draft=False), reference(data, (128, 96), None))
