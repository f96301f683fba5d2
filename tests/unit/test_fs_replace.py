"""Record replacement never loses the record: each store's way of putting a new file in place, with a
fault injected into a real filesystem (the local disk behind a pyarrow handler that raises on the Nth
call of an operation and, for HDFS, refuses to rename onto an existing file as HDFS does)."""

import json
import math
import posixpath
from collections import Counter

import pyarrow.fs as pafs
import pytest

from hopsml.errors import InvalidNameError, StorageError
from hopsml.fs import Storage
from hopsml.redact import redact_uri


class FaultyFileSystem(pafs.FileSystemHandler):
    """The local disk with a store's rename rules and failures injected: fail={"move": {2}} makes
    the second move raise."""

    def __init__(self, kind: str, fail: dict[str, set[int]] | None = None) -> None:
        self.kind, self.fail, self.calls = kind, fail or {}, Counter()
        self.inner = pafs.LocalFileSystem()

    def _call(self, op: str) -> None:
        self.calls[op] += 1
        if self.calls[op] in self.fail.get(op, ()):
            raise OSError(f"injected failure of {op} call {self.calls[op]}")

    def get_type_name(self):
        return self.kind

    def normalize_path(self, path):
        return path

    def get_file_info(self, paths):
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.inner.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise OSError("not in tests")

    def delete_file(self, path):
        self._call("delete_file")
        self.inner.delete_file(path)

    def move(self, src, dest):
        self._call("move")
        if self.kind == "hdfs" and self.inner.get_file_info(dest).type != pafs.FileType.NotFound:
            raise OSError(f"rename {src} to {dest}: destination exists")  # what HDFS does
        self.inner.move(src, dest)

    def copy_file(self, src, dest):
        self._call("copy_file")
        self.inner.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.inner.open_input_stream(path)

    def open_input_file(self, path):
        return self.inner.open_input_file(path)

    def open_output_stream(self, path, metadata):
        return self.inner.open_output_stream(path)

    def open_append_stream(self, path, metadata):
        return self.inner.open_append_stream(path)


def faulty_storage(tmp_path, kind: str, **fail: set[int]) -> tuple[Storage, FaultyFileSystem]:
    handler = FaultyFileSystem(kind, fail)
    storage = Storage(str(tmp_path))
    storage._fs, storage._base, storage.is_local = pafs.PyFileSystem(handler), str(tmp_path), False
    return storage, handler


def files(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir())


def test_local_rename_failure_keeps_the_record_and_the_new_content(tmp_path):
    storage, handler = faulty_storage(tmp_path, "local")
    storage.write_json("rec.json", {"state": "RUNNING"})
    handler.fail = {"move": {2, 3, 4}}  # every further rename fails
    with pytest.raises(StorageError, match=r"new content is kept in .*\.rec\.json\.tmp-") as info:
        storage.write_json("rec.json", {"state": "FINISHED"})
    assert json.loads((tmp_path / "rec.json").read_text()) == {"state": "RUNNING"}
    kept = [name for name in files(tmp_path) if name.startswith(".rec.json.tmp-")]
    assert len(kept) == 1 and kept[0] in str(info.value)
    assert json.loads((tmp_path / kept[0]).read_text()) == {"state": "FINISHED"}


def test_failure_while_writing_leaves_no_temp_file(tmp_path):
    storage, _ = faulty_storage(tmp_path, "local")
    storage.write_text("f.txt", "old")
    with pytest.raises(RuntimeError):
        with storage.open("f.txt", "wb") as stream:
            stream.write(b"half")
            raise RuntimeError("crash while writing")
    assert files(tmp_path) == ["f.txt"] and (tmp_path / "f.txt").read_text() == "old"


def test_hdfs_replaces_an_existing_file_by_moving_it_aside(tmp_path):
    storage, handler = faulty_storage(tmp_path, "hdfs")
    storage.write_json("rec.json", {"v": 1})
    storage.write_json("rec.json", {"v": 2})
    assert storage.read_json("rec.json") == {"v": 2} and files(tmp_path) == ["rec.json"]
    assert handler.calls["delete_file"] == 1  # the old copy, after the new one was in place


def test_hdfs_failed_rename_in_restores_the_old_file_and_keeps_the_new(tmp_path):
    storage, handler = faulty_storage(tmp_path, "hdfs")
    storage.write_json("rec.json", {"v": 1})
    handler.calls.clear()
    handler.fail = {"move": {2}}  # 1: old aside, 2: new in (fails), 3: old back
    with pytest.raises(StorageError, match="new content is kept in"):
        storage.write_json("rec.json", {"v": 2})
    assert storage.read_json("rec.json") == {"v": 1}
    kept = [name for name in files(tmp_path) if name.startswith(".rec.json.tmp-")]
    assert len(kept) == 1 and json.loads((tmp_path / kept[0]).read_text()) == {"v": 2}
    assert not [name for name in files(tmp_path) if ".old-" in name]


def test_hdfs_failed_restore_names_where_both_versions_are(tmp_path):
    storage, handler = faulty_storage(tmp_path, "hdfs")
    storage.write_json("rec.json", {"v": 1})
    handler.calls.clear()
    handler.fail = {"move": {2, 3}}
    with pytest.raises(StorageError, match=r"previous content is in .*\.rec\.json\.old-") as info:
        storage.write_json("rec.json", {"v": 2})
    old = [name for name in files(tmp_path) if name.startswith(".rec.json.old-")]
    new = [name for name in files(tmp_path) if name.startswith(".rec.json.tmp-")]
    assert len(old) == 1 and len(new) == 1 and old[0] in str(info.value) and new[0] in str(info.value)
    assert json.loads((tmp_path / old[0]).read_text()) == {"v": 1}


def test_hdfs_failure_to_delete_the_old_copy_is_not_an_error(tmp_path, caplog):
    storage, handler = faulty_storage(tmp_path, "hdfs")
    storage.write_json("rec.json", {"v": 1})
    handler.fail = {"delete_file": {1}}
    storage.write_json("rec.json", {"v": 2})
    assert storage.read_json("rec.json") == {"v": 2}
    assert "could not remove the previous version" in caplog.text


def test_s3_copies_then_deletes_and_keeps_the_temp_object_when_the_copy_fails(tmp_path):
    storage, handler = faulty_storage(tmp_path, "s3")
    storage.write_json("rec.json", {"v": 1})
    storage.write_json("rec.json", {"v": 2})
    assert storage.read_json("rec.json") == {"v": 2} and files(tmp_path) == ["rec.json"]
    assert handler.calls["move"] == 0 and handler.calls["copy_file"] == 2
    handler.fail = {"copy_file": {3}}
    with pytest.raises(StorageError, match="new content is kept in"):
        storage.write_json("rec.json", {"v": 3})
    assert storage.read_json("rec.json") == {"v": 2}
    kept = [name for name in files(tmp_path) if name.startswith(".rec.json.tmp-")]
    assert len(kept) == 1 and json.loads((tmp_path / kept[0]).read_text()) == {"v": 3}


def test_write_json_writes_nan_and_infinity_as_strings(tmp_path):
    storage = Storage(str(tmp_path))
    storage.write_json("r.json", {"metric": math.nan, "bounds": [math.inf, -math.inf, 1.5], "n": None})
    text = (tmp_path / "r.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"metric": "nan", "bounds": ["inf", "-inf", 1.5], "n": None}


def test_a_name_too_long_for_a_filesystem_says_so(tmp_path):
    storage = Storage(str(tmp_path))
    storage.makedirs("Projects/demo/Datasets")
    for action in (lambda p: storage.exists(p), lambda p: storage.makedirs(p),
                   lambda p: storage.write_text(posixpath.join(p, "x"), "x")):
        with pytest.raises(InvalidNameError, match="name too long") as info:
            action("Projects/demo/Datasets/" + "a" * 300)
        assert "cannot reach" not in str(info.value) and "300" in str(info.value)


@pytest.mark.parametrize("uri, shown", [
    ("s3://AKIAXXX:s3cr3t@bucket/root?region=eu-west-1", "s3://bucket/root?region=eu-west-1"),
    ("s3://bucket/root?access_key=AKIAXXX&secret_key=s3cr3t&session_token=tok&region=eu-west-1",
     "s3://bucket/root?region=eu-west-1"),
    ("hdfs://me:pw@nn:8020/user/me", "hdfs://nn:8020/user/me"),
    ("/local/path", "/local/path"),
    ("file:///local/path", "file:///local/path"),
])
def test_redact_uri_strips_credentials(uri, shown):
    assert redact_uri(uri) == shown


def test_storage_shows_no_credentials_but_keeps_them_to_connect():
    root = "s3://AKIAXXX:s3cr3t@bucket/root?secret_key=s3cr3t2&region=eu-west-1"
    storage = Storage(root)
    shown = " ".join([repr(storage), storage.uri(), storage.uri("Projects/p")])
    assert "s3cr3t" not in shown and "AKIAXXX" not in shown
    assert storage.uri("Projects/p") == "s3://bucket/root/Projects/p"
    assert storage.root == root  # what the filesystem is built from
