"""The notebook helpers: hdfs.* relative to the project, devices.get_num_gpus()."""

import pytest

from hopsml import devices, hdfs
from hopsml.errors import StorageError
from hopsml.fs import Storage
from hopsml.tracking.record import ExperimentRun


def test_hdfs_helpers_work_relative_to_the_project(root, tmp_path):
    assert hdfs.project_path() == str(root / "Projects" / "test")
    local = tmp_path / "data.csv"
    local.write_text("a,b\n1,2\n")
    where = hdfs.copy_to_hdfs(str(local), "Resources/data.csv")
    assert where == str(root / "Projects" / "test" / "Resources" / "data.csv")
    assert hdfs.exists("Resources/data.csv") and not hdfs.exists("Resources/other.csv")
    assert hdfs.ls("Resources") == [where]
    with hdfs.open_file("Resources/data.csv") as f:
        assert f.read() == b"a,b\n1,2\n"
    with hdfs.open_file("Resources/new.txt", "wb") as f:
        f.write(b"written")
    back = hdfs.copy_to_local("Resources/new.txt", str(tmp_path / "back.txt"))
    assert open(back, "rb").read() == b"written"
    assert hdfs.exists("Projects/test/Resources/new.txt")  # absolute-in-root paths work too


def test_gpu_count_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert devices.get_num_gpus() == 2 and devices.visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert devices.get_num_gpus() == 0


def test_experiment_on_unwritable_root_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StorageError, match="writable"):
        ExperimentRun.start(Storage(str(blocker)), "p", "local-1", name="x")
