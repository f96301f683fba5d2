"""TensorFlow cluster layouts, launch's argument lists, and ranks run in child processes (no Spark)."""

import json
import os

import pytest

from hopsml import tensorboard
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.child import ChildRank
from hopsml.launcher.task.function import run_function
from hopsml.launcher.task.tf_cluster import MIRRORED, PARAMETER_SERVER, roles, tf_config
from hopsml.runs.engine import executions as _executions

ADDRESSES = [f"h:{port}" for port in range(1, 6)]


def test_mirrored_layout_with_an_evaluator():
    assert roles(MIRRORED, 3) == [("worker", 0), ("worker", 1), ("worker", 2)]
    config = tf_config(MIRRORED, ADDRESSES[:3], 2, evaluator=True)
    assert config == {"cluster": {"worker": ["h:1", "h:2"], "evaluator": ["h:3"]},
                      "task": {"type": "evaluator", "index": 0}}
    with pytest.raises(HopsmlError, match="at least one worker"):
        roles(MIRRORED, 1, evaluator=True)


def test_parameter_server_layout():
    config = tf_config(PARAMETER_SERVER, ADDRESSES, 3, num_ps=2)
    assert config["cluster"] == {"chief": ["h:1"], "ps": ["h:2", "h:3"], "worker": ["h:4", "h:5"]}
    assert config["task"] == {"type": "worker", "index": 0}
    assert tf_config(PARAMETER_SERVER, ADDRESSES, 4, num_ps=1, evaluator=True)["task"] == {"type": "evaluator",
                                                                                          "index": 0}
    with pytest.raises(HopsmlError, match="at least one ps and one worker"):
        roles(PARAMETER_SERVER, 2, num_ps=1)
    with pytest.raises(HopsmlError, match="unknown TensorFlow strategy"):
        roles("horovod", 2)


def test_launch_arguments_as_lists():
    assert _executions({"a": 1, "b": "x"}) is None
    assert _executions({"a": [1, 2], "b": [5, 3], "c": 7}) == [{"a": 1, "b": 5, "c": 7}, {"a": 2, "b": 3, "c": 7}]
    assert _executions({"layers": [[64, 32]]}) == [{"layers": [64, 32]}]
    with pytest.raises(HopsmlError, match="same length"):
        _executions({"a": [1, 2], "b": [1]})
    with pytest.raises(HopsmlError, match="empty"):
        _executions({"a": []})


def _spec(tmp_path, **kwargs):
    return TaskSpec(Storage(str(tmp_path / "root")), "run", None, b"secret", **kwargs)


def in_child(value):
    print(f"child {os.getpid()} got {value}")
    path = os.path.join(tensorboard.logdir(), "events.txt")
    with open(path, "w") as f:
        f.write("event")
    return {"metric": value, "pid": os.getpid(), "tf_config": os.environ.get("TF_CONFIG")}


def test_a_rank_runs_in_a_child_process_with_the_parent_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "worker", "index": 0}}))
    child = ChildRank(lambda: in_child(3), _spec(tmp_path, local_logdir=True), rank=0, world_size=1,
                      write_metrics=True)
    report = child.wait(120)
    assert report["ok"], report
    assert report["result"]["metric"] == 3 and report["result"]["pid"] != os.getpid()
    assert json.loads(report["result"]["tf_config"])["task"]["index"] == 0
    run_dir = tmp_path / "root" / "run"
    assert "got 3" in (run_dir / "output.log").read_text()
    assert (run_dir / "tensorboard" / "events.txt").read_text() == "event"  # local logdir copied in


def test_a_child_that_dies_is_reported_with_its_exit_code(tmp_path):
    def dies():
        os._exit(7)

    report = ChildRank(dies, _spec(tmp_path), rank=1, world_size=2, write_metrics=False).wait(120)
    assert not report["ok"] and "rank 1" in report["error"] and "code 7" in report["error"]


def test_a_child_past_its_time_is_killed(tmp_path):
    def sleeps():
        import time

        time.sleep(60)

    report = ChildRank(sleeps, _spec(tmp_path), rank=0, world_size=1, write_metrics=False).wait(2)
    assert not report["ok"] and "killed" in report["error"]


def test_local_logdir_in_process(tmp_path):
    report = run_function(in_child, {"value": 1}, _spec(tmp_path, local_logdir=True))
    assert report["ok"]
    assert (tmp_path / "root" / "run" / "tensorboard" / "events.txt").exists()


def test_local_logdir_is_copied_in_while_the_function_runs(tmp_path, monkeypatch):
    import threading

    from hopsml.tracking import run_context

    monkeypatch.setattr(run_context, "TENSORBOARD_SYNC_S", 0.01)
    seen = threading.Event()

    def waits_for_the_copy():
        with open(os.path.join(tensorboard.logdir(), "events.txt"), "w") as f:
            f.write("step 1")
        copied = tmp_path / "root" / "run" / "tensorboard" / "events.txt"
        for _ in range(6000):  # bounded: the sync thread copies every 0.01 s
            if copied.exists():
                seen.set()
                break
            threading.Event().wait(0.01)

    assert run_function(waits_for_the_copy, {}, _spec(tmp_path, local_logdir=True))["ok"]
    assert seen.is_set()
