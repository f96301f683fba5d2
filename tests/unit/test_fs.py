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
