"""What the image job reads and refuses: a tree where every file is rejected, files too large to
read, and every format Pillow decodes."""

import json
import os

import numpy as np
import pytest

from hopsml import cli, config
from hopsml.data import dataset as ds
from hopsml.data import imaging
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
    small = imaging.encode_png(np.full((6, 6, 3), 7, np.uint8))
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
