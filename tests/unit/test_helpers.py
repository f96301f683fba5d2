"""The notebook helpers: devices.get_num_gpus() (hdfs.* is covered in test_hdfs.py)."""

import pytest

from hopsml import devices
from hopsml.errors import StorageError
from hopsml.fs import Storage
from hopsml.tracking.record import ExperimentRun


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
