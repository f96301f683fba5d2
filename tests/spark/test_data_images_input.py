"""What the image job reads and refuses: a tree where every file is rejected, files too large to
read, and every format Pillow decodes."""

import os

import pytest

from hopsml import cli, config
from hopsml.data import dataset as ds
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
