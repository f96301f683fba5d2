"""hops' numpy_helper and pandas_helper on a local root and on S3 (a local server speaking the real
protocol): what a notebook writes through them reads back equal, by project-relative and absolute
paths, and a missing file or a folder is a clear error."""

import numpy as np
import pandas as pd
import pytest
from s3 import s3_root, s3_server

from hopsml import hdfs, numpy_helper, pandas_helper
from hopsml.hdfs import InvalidPathError, PathNotFoundError


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["local", "s3"])
def project(request, tmp_path, monkeypatch):
    root = str(tmp_path / "root") if request.param == "local" else s3_root(request.getfixturevalue("s3_endpoint"))
    monkeypatch.setenv("HOPSML_ROOT", root)
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    monkeypatch.chdir(tmp_path)
    return request.param


def test_numpy_arrays_round_trip_under_the_names_numpy_gives(project):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    numpy_helper.save("Resources/a", a)  # numpy's rule: the .npy suffix is added
    assert hdfs.exists("Resources/a.npy") and not hdfs.exists("Resources/a")
    np.testing.assert_array_equal(numpy_helper.load("Resources/a.npy"), a)
    np.testing.assert_array_equal(numpy_helper.load(hdfs.project_path() + "Resources/a.npy"), a)

    numpy_helper.savez("Resources/many", a, b=np.ones(3))
    with numpy_helper.load("Resources/many.npz") as archive:
        assert sorted(archive.files) == ["arr_0", "b"]
        np.testing.assert_array_equal(archive["arr_0"], a)
    numpy_helper.savez_compressed("Resources/small.npz", z=np.zeros(1000))
    assert hdfs.stat("Resources/small.npz").st_size < hdfs.stat("Resources/many.npz").st_size
    np.testing.assert_array_equal(numpy_helper.load("Resources/small.npz")["z"], np.zeros(1000))


def test_numpy_text_and_raw_readers(project):
    hdfs.dump("# x y\n1 2.5\n3 4.5\n", "Resources/points.txt")
    np.testing.assert_array_equal(numpy_helper.loadtxt("Resources/points.txt"), [[1, 2.5], [3, 4.5]])
    hdfs.dump("a,b\n1,\n3,4\n", "Resources/gaps.csv")
    table = numpy_helper.genfromtxt("Resources/gaps.csv", delimiter=",", skip_header=1)
    assert np.isnan(table[0, 1]) and table[1, 1] == 4
    hdfs.dump("id=7 score=0.5\nid=9 score=1.5\n", "Resources/log.txt")
    found = numpy_helper.fromregex("Resources/log.txt", r"id=(\d+) score=([\d.]+)", [("id", int), ("score", float)])
    assert found["id"].tolist() == [7, 9] and found["score"].tolist() == [0.5, 1.5]
    hdfs.dump(np.arange(5, dtype=np.int16).tobytes(), "Resources/raw.bin")
    assert numpy_helper.fromfile("Resources/raw.bin", dtype=np.int16).tolist() == [0, 1, 2, 3, 4]
    mapped = numpy_helper.memmap("Resources/raw.bin", dtype=np.int16, mode="r")
    assert mapped[1:4].tolist() == [1, 2, 3]


def test_memmap_writes_reach_the_file_under_a_local_root_and_are_refused_elsewhere(project):
    hdfs.dump(np.zeros(4, dtype=np.int32).tobytes(), "Resources/counts.bin")
    if project == "local":
        mapped = numpy_helper.memmap("Resources/counts.bin", dtype=np.int32, mode="r+")
        mapped[2] = 7
        mapped.flush()
        del mapped
        assert np.frombuffer(hdfs.load("Resources/counts.bin"), dtype=np.int32).tolist() == [0, 0, 7, 0]
    else:
        with pytest.raises(InvalidPathError, match="not under a local root"):
            numpy_helper.memmap("Resources/counts.bin", dtype=np.int32, mode="r+")


def test_pandas_frames_round_trip(project):
    frame = pd.DataFrame({"name": ["a", "b, quoted", "ü"], "value": [1.5, 2.0, np.nan]})
    pandas_helper.write_csv("Resources/frame.csv", frame, index=False)
    np.testing.assert_array_equal(pandas_helper.read_csv("Resources/frame.csv")["name"], frame["name"])
    pandas_helper.write_parquet("Resources/frame.parquet", frame)
    pd.testing.assert_frame_equal(pandas_helper.read_parquet("Resources/frame.parquet"), frame)
    pandas_helper.write_json("Resources/frame.json", frame, orient="records", lines=True)
    back = pandas_helper.read_json("Resources/frame.json", orient="records", lines=True)
    assert back["name"].tolist() == frame["name"].tolist()


def test_a_frame_that_fails_to_serialise_leaves_the_old_file(project):
    pandas_helper.write_csv("Resources/keep.csv", pd.DataFrame({"a": [1]}), index=False)
    with pytest.raises(TypeError):
        pandas_helper.write_json("Resources/keep.csv", pd.DataFrame({"a": [1]}), no_such_option=True)
    assert hdfs.load("Resources/keep.csv") == b"a\n1\n"


def test_missing_files_and_folders_are_clear_errors(project):
    with pytest.raises(PathNotFoundError, match="does not exist"):
        numpy_helper.load("Resources/nothing.npy")
    with pytest.raises(PathNotFoundError, match="does not exist"):
        pandas_helper.read_csv("Resources/nothing.csv")
    hdfs.mkdir("Resources/folder")
    with pytest.raises(InvalidPathError, match="is a folder"):
        pandas_helper.read_csv("Resources/folder")
