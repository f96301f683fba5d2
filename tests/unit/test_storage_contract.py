"""The storage contract, run against every backend a root URI can name here: a local path, a file://
URI, and S3 (a local S3 server speaking the real protocol). HDFS needs a Hadoop cluster and libhdfs,
which this machine cannot have; it goes through the same pyarrow.fs calls."""

import gzip
import pickle

import pytest
from s3 import s3_root, s3_server

from hopsml.errors import StorageError
from hopsml.fs import Storage


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["local", "file", "s3"])
def storage(request, tmp_path):
    if request.param == "local":
        return Storage(str(tmp_path / "root"))
    if request.param == "file":
        return Storage(f"file://{tmp_path}/root")
    return Storage(s3_root(request.getfixturevalue("s3_endpoint")))


def test_whole_files_replace_atomically(storage):
    storage.write_json("Projects/p/rec.json", {"state": "RUNNING"})
    storage.write_json("Projects/p/rec.json", {"state": "FINISHED"})
    assert storage.read_json("Projects/p/rec.json") == {"state": "FINISHED"}
    assert storage.ls("Projects/p") == ["Projects/p/rec.json"]  # nothing left aside
    assert storage.exists("Projects/p/rec.json") and not storage.exists("Projects/p/other.json")
    assert storage.isdir("Projects/p") and not storage.isdir("Projects/p/rec.json")


def test_failed_write_keeps_the_old_file(storage):
    storage.write_text("f.txt", "old")
    with pytest.raises(RuntimeError):
        with storage.open("f.txt", "wb") as stream:
            stream.write(b"half")
            raise RuntimeError("crash")
    assert storage.read_text("f.txt") == "old" and storage.ls("") == ["f.txt"]


def test_compressed_files_read_back_as_stored(storage):
    packed = gzip.compress(b"x" * 1000)   # a gzipped TFRecord shard, an environment archive
    storage.write_bytes("d/part-0.tfrecord.gz", packed)
    assert storage.read_bytes("d/part-0.tfrecord.gz") == packed
    with storage.open_input("d/part-0.tfrecord.gz") as stream:
        assert stream.read() == packed


def test_append(storage):
    for line in ("1\n", "2\n", "3\n"):
        storage.append_text("m/metrics.jsonl", line)
    assert storage.read_text("m/metrics.jsonl") == "1\n2\n3\n"


def test_upload_download_and_listing(storage, tmp_path):
    src = tmp_path / "src"
    (src / "tb").mkdir(parents=True)
    (src / "tb" / "events").write_bytes(b"\x00" * 1000)
    (src / "out.log").write_text("log")
    storage.upload(str(src), "run")
    files = [p for p in storage.ls("run", recursive=True) if not storage.isdir(p)]
    assert sorted(files) == ["run/out.log", "run/tb/events"]
    storage.download("run", str(tmp_path / "back"))
    assert (tmp_path / "back" / "tb" / "events").read_bytes() == b"\x00" * 1000


def test_claim_dir_once(storage):
    assert storage.claim_dir("Experiments/app_1") is True
    assert storage.claim_dir("Experiments/app_1") is False
    assert storage.claim_dir("Experiments/app_2") is True


def test_pickles_as_its_uri(storage):
    storage.write_text("x.txt", "shared")
    clone = pickle.loads(pickle.dumps(storage))
    assert clone.read_text("x.txt") == "shared" and clone.uri("x.txt") == storage.uri("x.txt")
    assert "?" not in storage.uri("x.txt")


def test_delete(storage):
    storage.write_text("d/a.txt", "a")
    storage.delete("d")
    assert not storage.exists("d/a.txt")


def test_move_dir_moves_a_whole_tree(storage):
    storage.write_text("stage/a.txt", "a")
    storage.write_bytes("stage/sub/b.bin", b"\x01\x02")
    storage.move_dir("stage", "Datasets/final")
    assert not storage.exists("stage")
    files = sorted(p for p in storage.ls("Datasets/final", recursive=True) if not storage.isdir(p))
    assert files == ["Datasets/final/a.txt", "Datasets/final/sub/b.bin"]
    assert storage.read_bytes("Datasets/final/sub/b.bin") == b"\x01\x02"


def test_copy_tree_copies_a_file_or_a_whole_folder(storage):
    storage.write_text("src/a.txt", "a")
    storage.write_bytes("src/sub/deep/b.bin", b"\x00\x01")
    storage.copy_tree("src/a.txt", "one/a.txt")
    assert storage.read_text("one/a.txt") == "a"
    storage.write_text("dst/sub/deep/b.bin", "old")
    storage.copy_tree("src", "dst")
    files = [p for p in storage.ls("dst", recursive=True) if not storage.isdir(p)]
    assert files == ["dst/a.txt", "dst/sub/deep/b.bin"]
    assert storage.read_bytes("dst/sub/deep/b.bin") == b"\x00\x01"
    assert storage.read_text("src/a.txt") == "a"   # the source stays
    with pytest.raises(StorageError, match="does not exist"):
        storage.copy_tree("missing", "x")


def test_open_input_streams_or_seeks_and_says_what_is_missing(storage):
    storage.write_bytes("f.bin", bytes(range(100)))
    with storage.open_input("f.bin") as stream:
        assert stream.read() == bytes(range(100))
    with storage.open_input("f.bin", seekable=True) as handle:
        handle.seek(90)
        assert handle.read(5) == bytes(range(90, 95))
    with pytest.raises(StorageError, match="does not exist"):
        storage.open_input("missing.bin")


def test_overwrite_bytes_replaces_in_place(storage):
    storage.write_bytes("hb/heartbeat", b"1")
    storage.overwrite_bytes("hb/heartbeat", b"22")
    assert storage.read_bytes("hb/heartbeat") == b"22"


def test_walk_lists_sorted_infos_with_root_relative_names(storage):
    storage.write_text("w/b.txt", "bb")
    storage.write_text("w/a/c.txt", "c")
    everything = storage.walk("w")
    assert [storage.relative(i.path) for i in everything] == ["w/a", "w/a/c.txt", "w/b.txt"]
    assert [i.size for i in everything if i.is_file] == [1, 2]
    assert [storage.relative(i.path) for i in storage.walk("w", recursive=False)] == ["w/a", "w/b.txt"]
    assert storage.walk("missing") == [] and storage.walk("w/b.txt") == []
    assert storage.relative(storage.path()) == ""
