"""What the image job reads and refuses: a tree where every file is rejected, files too large to
read, and every format Pillow decodes."""

import json
import os

import numpy as np
import pytest

from hopsml import cli, config
from hopsml.data import dataset as ds
from hopsml.data import pixels
from hopsml.data.images import prepare_images


def _datasets(root):
    folder = root / "Projects" / "test" / "Datasets"
    return sorted(os.listdir(folder)) if folder.exists() else []


def test_a_tree_where_every_file_is_rejected_fails_and_writes_nothing(spark, tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    for label in ("cat", "dog"):
        (src / label).mkdir(parents=True)
        (src / label / "empty.png").write_bytes(b"")
        (src / label / "notes.jpg").write_text("not an image\n")
    (src / "dog" / "half.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    root = tmp_path / "root"
    settings = config.load(environ={}, root=str(root), project="test", master="local[2]")
    with pytest.raises(ds.DatasetError, match=r"all 5 images .* were rejected \(corrupt image: 1, "
                                              r"empty file: 2, not an image: 2\)"):
        prepare_images(str(src), "nothing", resize=(8, 8), crop=None, settings=settings, spark=spark)
    assert _datasets(root) == []   # no folder, so no _SUCCESS and no empty dataset

    monkeypatch.setenv("HOPSML_ROOT", str(root))
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    assert cli.main(["prep", "images", str(src), "nothing", "--resize", "8x8", "--crop", "none"]) != 0
    assert "empty file: 2" in capsys.readouterr().err
    assert _datasets(root) == []


def test_huge_files_are_rejected_unread_with_their_reasons(spark, tmp_path):
    # 2 GiB sparse files (no disk used): read whole, each would take 2 GiB of a worker's memory.
    src = tmp_path / "src" / "cat"
    src.mkdir(parents=True)
    small = pixels.encode_png(np.full((6, 6, 3), 7, np.uint8))
    (src / "ok.png").write_bytes(small)
    for name, head in (("zeros.png", b""), ("huge.png", small)):
        with open(src / name, "wb") as out:
            out.write(head)
            out.truncate(2 << 30)
    settings = config.load(environ={}, root=str(tmp_path / "root"), project="test", master="local[2]")
    summary = prepare_images(str(tmp_path / "src"), "huge", resize=(6, 6), crop=None, test_fraction=0,
                             max_file_mb=64, settings=settings, spark=spark)
    assert (summary.read, summary.written) == (3, 1)
    assert summary.rejected_reasons == {"not an image": 1, "too large": 1}
    rejected = {os.path.basename(r["path"]): r for r in map(json.loads, open(
        tmp_path / "root/Projects/test/Datasets/huge/_rejected/part-00000.jsonl"))}
    assert f"a file of {2 << 30} bytes, over the limit of {64 << 20}" in rejected["huge.png"]["detail"]


# lossy, or a palette (gif), or stored at icon sizes and resized back (ico, icns): close, not equal
_APPROXIMATE = {"jpg", "jpeg", "jpe", "jfif", "webp", "avif", "avifs", "gif", "ico", "icns"}


def _smooth(width, height):
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // (width - 1), y * 255 // (height - 1), (x + y) * 127 // (width + height)],
                    -1).astype(np.uint8)


def _write_every_format(folder):
    """One file per extension this Pillow both writes and decodes, plus an animated GIF, a 16-bit
    TIFF and a lossless WebP with alpha; returns path -> the pixels expected at 24x18."""
    from PIL import Image

    folder.mkdir(parents=True)
    smooth = _smooth(24, 18)
    expected = {}
    for ext in pixels.readable_extensions():
        fmt = Image.registered_extensions()["." + ext]
        path = folder / f"one.{ext}"
        try:
            Image.fromarray(smooth).save(path, fmt)
        except (KeyError, OSError, ValueError):   # Pillow reads it but cannot write it
            path.unlink(missing_ok=True)
            continue
        expected[path] = smooth
    red, blue = Image.new("RGB", (24, 18), (255, 0, 0)), Image.new("RGB", (24, 18), (0, 0, 255))
    red.save(folder / "anim.gif", save_all=True, append_images=[blue], duration=100, loop=0)
    expected[folder / "anim.gif"] = np.asarray(red)
    wide = (np.arange(24 * 18, dtype=np.uint32).reshape(18, 24) * 151).astype(np.uint16)
    Image.fromarray(wide).save(folder / "deep16.tif")
    gray = ((wide.astype(np.int64) * 255 + 32767) // 65535).astype(np.uint8)
    expected[folder / "deep16.tif"] = np.repeat(gray[..., None], 3, -1)
    rgba = np.dstack([smooth, np.full((18, 24), 255, np.uint8)])
    Image.fromarray(rgba, "RGBA").save(folder / "alpha.webp", lossless=True)
    expected[folder / "alpha.webp"] = smooth
    return expected


def test_every_format_pillow_decodes_is_read_and_there_is_no_default_crop(spark, tmp_path):
    from hopsml.data.readers import reader

    expected = _write_every_format(tmp_path / "src" / "pics")
    (tmp_path / "src" / "pics" / "notes.txt").write_text("not an image")
    exts = {path.suffix.lower() for path in expected}
    assert {".webp", ".gif", ".tif", ".tiff", ".bmp", ".png", ".jpg"} <= exts
    settings = config.load(environ={}, root=str(tmp_path / "root"), project="test", master="local[2]")
    summary = prepare_images(str(tmp_path / "src"), "formats", resize=(24, 18), test_fraction=0,
                             settings=settings, spark=spark)
    assert summary.rejected_reasons == {}
    assert (summary.read, summary.written) == (len(expected), len(expected))
    assert summary.skipped == {"extension .txt": 1}
    assert "images resized to 24x18 (aspect ratio not kept), not cropped" in str(summary)
    batch = next(iter(reader("formats", batch_size=1000, shuffle=False, fields=["image", "path"],
                             settings=settings)))
    assert batch["image"].shape == (len(expected), 18, 24, 3)   # the resize, not a default crop
    for path, image in zip(batch["path"], batch["image"]):
        want = expected[type(tmp_path)(path[len("file:"):])]
        if path.rsplit(".", 1)[1].lower() in _APPROXIMATE:
            assert np.abs(image.astype(int) - want).mean() < 8, path
        else:
            np.testing.assert_array_equal(image, want, err_msg=path)
    stats = json.load(open(tmp_path / "root/Projects/test/Datasets/formats/stats.json"))
    assert stats["rows"] == {"all": len(expected)}


def test_cli_resize_alone_gives_that_size_and_help_says_so(spark, tmp_path, monkeypatch, capsys):
    from hopsml.data import samples

    samples.write_digits(str(tmp_path / "src"), limit=12, size=16, bad_files=False)
    monkeypatch.setenv("HOPSML_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    assert cli.main(["prep", "images", str(tmp_path / "src"), "small", "--resize", "20x10"]) == 0
    assert "images resized to 20x10 (aspect ratio not kept), not cropped" in capsys.readouterr().out
    manifest = json.load(open(tmp_path / "root/Projects/test/Datasets/small/dataset.json"))
    assert manifest["fields"]["image"]["shape"] == [10, 20, 3] and manifest["options"]["crop"] is None
    with pytest.raises(SystemExit):
        cli.main(["prep", "images", "--help"])
    assert "default: no crop" in " ".join(capsys.readouterr().out.split())
