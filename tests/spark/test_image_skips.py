"""The image job on a tree with a symlink loop, a link out of the tree and files of other formats:
each image is one row, and what was skipped is shown with the counts (summary, manifest, listing)."""

import json
import os

from hopsml import cli, config
from hopsml.data import samples
from hopsml.data.images import LINK_INSIDE, LINK_OUTSIDE, prepare_images


def test_links_are_not_followed_and_skips_are_counted(spark, tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    counts = samples.write_digits(str(src), limit=8, size=16, bad_files=False)
    classes = sorted(os.listdir(src))
    os.symlink("..", src / classes[0] / "loop")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", src / "elsewhere")
    (src / classes[1] / "notes.txt").write_bytes(b"II*\x00")
    (src / classes[1] / "clip.mp4").write_bytes(b"GIF89a")
    root = tmp_path / "root"
    settings = config.load(environ={}, root=str(root), project="test", master="local[4]")
    summary = prepare_images(str(src), "skips", resize=(8, 8), crop=None, test_fraction=0.5,
                             settings=settings, spark=spark)
    assert summary.read == summary.written == counts["images"] == 8
    assert summary.skipped == {LINK_INSIDE: 1, LINK_OUTSIDE: 1, "extension .mp4": 1, "extension .txt": 1}
    assert "skipped 4 not read" in str(summary) and "extension .txt: 1" in str(summary)
    manifest = json.loads((root / "Projects/test/Datasets/skips/dataset.json").read_text())
    assert manifest["counts"] == {"read": 8, "written": 8, "rejected": 0, "skipped": 4}
    assert manifest["skipped_reasons"] == summary.skipped
    monkeypatch.setenv("HOPSML_ROOT", str(root))
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    assert cli.main(["datasets", "list"]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert "SKIPPED" in header.split() and row.split()[header.split().index("SKIPPED")] == "4"
