"""The image job's source listing: no symbolic link is followed (a loop or a link out of the tree adds
no rows), each file is listed once, and what was skipped is counted by reason."""

import os

import pytest

from hopsml.data import dataset as ds
from hopsml.data.images import HARD_LINK, LINK_BROKEN, LINK_INSIDE, LINK_OUTSIDE, label_of, list_images, scan_images


@pytest.fixture
def tree(tmp_path):
    src, outside = tmp_path / "src", tmp_path / "outside"
    for name in ("cat/a.png", "cat/b.jpg", "dog/c.png", "dog/d.txt", "dog/e.mp4", "dog/f.MP4", "dog/README"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(b"x" * 10)
    (outside / "lion").mkdir(parents=True)
    (outside / "lion" / "l.png").write_bytes(b"y")
    os.symlink("..", src / "cat" / "loop")                          # a loop back to the top
    os.symlink(outside / "lion", src / "lion")                      # a folder outside the tree
    os.symlink(outside / "lion" / "l.png", src / "dog" / "out.png")  # a file outside the tree
    os.symlink("../cat/a.png", src / "dog" / "alias.png")           # a file inside the tree
    os.symlink("missing.png", src / "dog" / "broken.png")
    os.link(src / "cat" / "b.jpg", src / "dog" / "same.jpg")         # one file, two names
    return src


def test_a_symlink_loop_or_a_link_out_of_the_tree_adds_nothing(tree):
    listed = [path for path, _ in list_images(str(tree))]
    rel = sorted(p[len("file:" + str(tree)) + 1:] for p in listed)
    assert rel == ["cat/a.png", "cat/b.jpg", "dog/c.png"]
    assert sorted({label_of(p) for p in listed}) == ["cat", "dog"]  # no class 'loop' or 'lion'


def test_skipped_links_and_extensions_are_counted(tree):
    scanned = scan_images(str(tree))
    assert scanned.skipped == {LINK_OUTSIDE: 2, LINK_INSIDE: 2, LINK_BROKEN: 1, HARD_LINK: 1,
                               "extension .mp4": 2, "extension .txt": 1, "no extension": 1}
    assert sorted(os.path.basename(p) for p in scanned.links) == ["alias.png", "broken.png", "lion",
                                                                  "loop", "out.png"]
    assert [size for _, size in scanned.files] == [10, 10, 10]


def test_a_source_that_is_itself_a_link_is_listed(tree, tmp_path):
    os.symlink(tree, tmp_path / "via")
    assert [p.rsplit("/", 2)[-2:] for p, _ in list_images(str(tmp_path / "via"))] == [
        ["cat", "a.png"], ["cat", "b.jpg"], ["dog", "c.png"]]


def test_a_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(ds.DatasetError, match="no such folder"):
        scan_images(str(tmp_path / "nothing"))
