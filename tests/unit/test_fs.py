import multiprocessing as mp
import os
import pickle

import pytest

from hopsml.errors import StorageError
from hopsml.fs import Storage


def test_write_read_ls_and_no_temp_files_left(tmp_path):
    storage = Storage(str(tmp_path))
    storage.write_json("a/b/rec.json", {"x": 1})
    storage.write_json("a/b/rec.json", {"x": 2})
    assert storage.read_json("a/b/rec.json") == {"x": 2}
    assert storage.ls("a/b") == ["a/b/rec.json"]
    assert storage.ls("missing") == []


def test_failed_write_leaves_old_file_and_no_debris(tmp_path):
    storage = Storage(str(tmp_path))
    storage.write_text("f.txt", "old")
    with pytest.raises(RuntimeError):
        with storage.open("f.txt", "wb") as stream:
            stream.write(b"half")
            raise RuntimeError("crash while writing")
    assert storage.read_text("f.txt") == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_file_uri_root_and_pickling(tmp_path):
    storage = Storage(f"file://{tmp_path}")
    storage.write_text("x.txt", "hi")
    clone = pickle.loads(pickle.dumps(storage))
    assert clone.read_text("x.txt") == "hi"
    assert (tmp_path / "x.txt").read_text() == "hi"


def test_append_upload_download(tmp_path):
    storage = Storage(str(tmp_path / "root"))
    storage.append_text("m.jsonl", "1\n")
    storage.append_text("m.jsonl", "2\n")
    assert storage.read_text("m.jsonl") == "1\n2\n"
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.bin").write_bytes(b"\x00\x01")
    storage.upload(str(src), "copied")
    assert storage.read_bytes("copied/sub/f.bin") == b"\x00\x01"
    out = storage.download("copied", str(tmp_path / "back"))
    assert (tmp_path / "back" / "sub" / "f.bin").read_bytes() == b"\x00\x01" and out


def test_unwritable_root_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StorageError, match="HOPSML_ROOT"):
        Storage(str(blocker)).makedirs("Projects/x")


def _claim_many(root, results):
    storage = Storage(root)
    results.extend([d for d in range(20) if storage.claim_dir(f"runs/{d}")])


def test_claim_dir_is_exclusive_across_processes(tmp_path):
    with mp.Manager() as manager:
        results = manager.list()
        procs = [mp.Process(target=_claim_many, args=(str(tmp_path), results)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        claimed = list(results)
    assert sorted(claimed) == list(range(20))  # every dir claimed exactly once


@pytest.fixture
def linked_root(tmp_path):
    """A local root whose run folder holds links: to a file and a folder outside the root, to a
    file and a folder inside it, a broken one, and two loops."""
    outside = tmp_path / "outside"
    (outside / "many").mkdir(parents=True)
    (outside / "secret.txt").write_text("secret")
    for index in range(50):
        (outside / "many" / f"f{index}.txt").write_text("x")
    storage = Storage(str(tmp_path / "root"))
    storage.write_text("run/kept/data.txt", "inside")
    run = tmp_path / "root" / "run"
    os.symlink(outside / "secret.txt", run / "program.py")
    os.symlink(outside / "many", run / "outside_dir")
    os.symlink(run / "kept" / "data.txt", run / "alias.txt")
    os.symlink(run / "kept", run / "alias_dir")
    os.symlink(run / "missing", run / "broken")
    os.symlink("..", run / "kept" / "up")            # a loop back to the run folder
    os.mkdir(run / "a")
    os.symlink("../b", run / "a" / "to_b")            # a -> b -> a
    os.mkdir(run / "b")
    os.symlink("../a", run / "b" / "to_a")
    return storage


def test_a_listing_never_leaves_the_root_and_ends_on_link_loops(linked_root):
    storage = linked_root
    listed = storage.ls("run", recursive=True)
    assert "run/program.py" not in listed and not any(p.startswith("run/outside_dir") for p in listed)
    assert "run/broken" not in listed
    assert {"run/kept/data.txt", "run/alias.txt", "run/alias_dir"} <= set(listed)
    assert "run/alias_dir/data.txt" not in listed and "run/kept/up/kept" not in listed
    assert len(listed) == len(set(listed)) < 30        # every real folder listed once
    assert storage.ls("run") == sorted(["run/a", "run/alias.txt", "run/alias_dir", "run/b", "run/kept"])
    assert not storage.contains("run/program.py") and not storage.contains("run/outside_dir/f1.txt")
    assert storage.contains("run/alias.txt") and storage.contains("run/not-there-yet")


def test_copy_tree_copies_no_link_that_leaves_the_root(linked_root):
    storage = linked_root
    storage.copy_tree("run", "copy")
    copied = storage.ls("copy", recursive=True)
    assert "copy/kept/data.txt" in copied and "copy/program.py" not in copied
    assert not any("outside_dir" in p for p in copied)
