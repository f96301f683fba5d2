import numpy as np
import pytest

from hopsml.errors import SerializationError
from hopsml.fs import Storage
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.function import normalise_result, run_function
from hopsml.layout import RunDir


def test_results_are_normalised_and_files_copied(tmp_path):
    storage = Storage(str(tmp_path / "root"))
    model = tmp_path / "model.bin"
    model.write_bytes(b"weights")
    result = normalise_result({"acc": np.float32(0.5), "model_file": str(model), "arr": np.arange(2)},
                              storage, RunDir("run"))
    assert result["acc"] == 0.5 and result["arr"] == [0, 1]
    assert storage.read_bytes("run/model.bin") == b"weights"
    assert result["model_file"] == storage.uri("run/model.bin")
    assert normalise_result(3, storage, RunDir("run")) == {"metric": 3}
    assert normalise_result(None, storage, RunDir("run")) == {}
    with pytest.raises(SerializationError, match="object"):
        normalise_result({"bad": object()}, storage, RunDir("run"))
    with pytest.raises(SerializationError, match="str"):
        normalise_result("not a metric", storage, RunDir("run"))


def test_run_function_reports_failure_with_user_traceback_and_tail(tmp_path):
    def boom():
        print("step 1 ok")
        raise RuntimeError("exploded")

    spec = TaskSpec(Storage(str(tmp_path)), "run", None, b"")
    report = run_function(boom, {}, spec)
    assert not report["ok"] and report["error"] == "RuntimeError: exploded"
    assert "in boom" in report["traceback"] and "run_function" not in report["traceback"]
    assert report["tail"] == "step 1 ok"
    log = (tmp_path / "run" / "output.log").read_text()
    assert "step 1 ok" in log and "exploded" in log


def test_run_function_success(tmp_path):
    spec = TaskSpec(Storage(str(tmp_path)), "run", None, b"")
    report = run_function(lambda x: {"double": x * 2}, {"x": 4}, spec)
    assert report["ok"] and report["result"] == {"double": 8}
