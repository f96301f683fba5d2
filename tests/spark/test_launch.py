"""experiment.launch end to end on the shared local SparkSession."""

import json
import os

import numpy as np
import pytest

from hopsml import config, experiment, tensorboard
from hopsml.errors import ExperimentFailed, HopsmlError, InvalidNameError, ResourceNotFoundError
from hopsml.tracking.metrics import read_metrics


def _record(logdir):
    with open(os.path.join(logdir, "experiment.json")) as f:
        return json.load(f)


def train(lr, epochs=3):
    import tempfile

    print(f"training with lr={lr}")
    for step in range(epochs):
        tensorboard.log({"loss": lr / (step + 1)}, step=step)
    path = os.path.join(tempfile.mkdtemp(), "weights.npy")
    np.save(path, np.ones(3))
    return {"accuracy": 0.75, "weights_file": path, "pid": os.getpid()}


def test_launch_versions_everything(spark, root, capsys):
    logdir, result = experiment.launch(train, {"lr": 0.5}, name="unit", description="d", metric_key="accuracy")
    rec = _record(logdir)
    assert rec["state"] == "FINISHED" and rec["metric"] == 0.75
    assert rec["hyperparameters"] == {"lr": 0.5} and rec["function"] == "train"
    assert rec["app_id"] == spark.sparkContext.applicationId and rec["id"].startswith(rec["app_id"] + "_")
    assert rec["versions"]["spark"] == spark.version and rec["finished"] and rec["duration"] >= 0
    files = set(os.listdir(logdir))
    assert {"experiment.json", "program.py", "conda.yml", "output.log", "metrics.jsonl", "tensorboard",
            "weights.npy"} <= files
    assert "training with lr=0.5" in open(os.path.join(logdir, "output.log")).read()
    assert "training with lr=0.5" in capsys.readouterr().out  # streamed to the caller
    assert [r["step"] for r in read_metrics(open(os.path.join(logdir, "metrics.jsonl")).read())] == [0, 1, 2]
    assert result["weights_file"] == f"Experiments/{os.path.basename(logdir)}/weights.npy"
    assert result["pid"] != os.getpid()  # ran in a Spark task, not on the driver


def test_two_launches_get_distinct_ids(spark, root):
    first, _ = experiment.launch(lambda: 1.0, name="a")
    second, _ = experiment.launch(lambda: 2.0, name="b")
    assert first != second and _record(second)["metric"] == 2.0


def failing():
    print("loaded data")
    raise ValueError("learning rate too high")


def test_failure_is_recorded_and_raised_with_traceback(spark, root):
    with pytest.raises(ExperimentFailed) as info:
        experiment.launch(failing, name="fails")
    message = str(info.value)
    assert "learning rate too high" in message and "in failing" in message and "loaded data" in message
    rec = _record(info.value.logdir)
    assert rec["state"] == "FAILED" and "learning rate too high" in rec["traceback"]


def test_unserialisable_return_fails_clearly(spark, root):
    with pytest.raises(ExperimentFailed, match="SerializationError"):
        experiment.launch(lambda: {"model": object()}, name="unpicklable")


def test_bad_arguments_fail_before_spark_runs(spark, root, tmp_path):
    with pytest.raises(InvalidNameError):
        experiment.launch(lambda: 1, name="../x")
    with pytest.raises(ResourceNotFoundError):
        experiment.launch(lambda: 1, name="x", versioned_resources=[str(tmp_path / "nope.csv")])
    assert not os.path.exists(root / "Projects" / "test" / "Experiments") or not os.listdir(
        root / "Projects" / "test" / "Experiments")


def test_launch_on_an_s3_root(spark, root, s3_endpoint, monkeypatch):
    from s3 import s3_root

    from hopsml.fs import Storage

    uri = s3_root(s3_endpoint)
    monkeypatch.setenv("HOPSML_ROOT", uri)
    logdir, result = experiment.launch(train, {"lr": 0.1}, name="on-s3", metric_key="accuracy")
    storage = Storage(uri)
    assert logdir.startswith("s3://hopsml-test/") and "?" not in logdir
    run = logdir[len(storage.uri()) + 1:]
    rec = storage.read_json(f"{run}/experiment.json")
    assert rec["state"] == "FINISHED" and rec["metric"] == 0.75
    files = {p.rsplit("/", 1)[-1] for p in storage.ls(run, recursive=True)}
    assert {"program.py", "conda.yml", "output.log", "metrics.jsonl", "weights.npy"} <= files
    assert any(name.startswith("events.out.tfevents") for name in files)
    assert "training with lr=0.1" in storage.read_text(f"{run}/output.log")
    assert result["weights_file"] == f"Experiments/{run.rsplit('/', 1)[-1]}/weights.npy"


def test_spark_workers_run_pyspark_s_own_daemon_unless_told_otherwise(spark):
    # hopsml's worker daemon (a zipimport patch that earns nothing on PySpark 4) is opt-in: the workers of a
    # session hopsml starts run PySpark's own, with CPython's zipimport as it is
    def probe(_):
        import zipimport

        yield zipimport.zipimporter.invalidate_caches.__qualname__

    assert spark.conf.get("spark.python.daemon.module", None) in (None, "pyspark.daemon")
    seen = set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(probe).collect())
    assert seen == {"zipimporter.invalidate_caches"}


def product(a, b, scale=1):
    tensorboard.log({"value": a * b * scale}, step=0)
    print(f"running a={a} b={b}")
    return {"metric": a * b * scale, "pid": os.getpid()}


def test_launch_with_lists_runs_one_execution_per_index(spark, root):
    logdir, results = experiment.launch(product, {"a": [1, 2], "b": [5, 3], "scale": 10}, name="lists")
    assert [r["metric"] for r in results] == [50, 60]  # product(a=1, b=5, scale=10), product(a=2, b=3, ...)
    rec = _record(logdir)
    assert rec["state"] == "FINISHED" and rec["executors"] == 2
    assert rec["hyperparameters"] == {"a": [1, 2], "b": [5, 3], "scale": 10}
    executions = rec["executions"]
    assert [e["params"] for e in executions] == [{"a": 1, "b": 5, "scale": 10}, {"a": 2, "b": 3, "scale": 10}]
    assert [e["metric"] for e in executions] == [50, 60]
    for execution in executions:  # each in its own folder, recorded like a search trial
        folder = execution["logdir"]
        assert os.path.dirname(folder) == logdir
        assert json.load(open(os.path.join(folder, ".hparams.json"))) == execution["params"]
        assert json.load(open(os.path.join(folder, ".outputs.json")))["metric"] == execution["metric"]
        assert f"running a={execution['params']['a']}" in open(os.path.join(folder, "output.log")).read()
        assert os.listdir(os.path.join(folder, "tensorboard"))


def test_launch_with_a_single_list_and_scalars_alone(spark, root):
    _, results = experiment.launch(product, {"a": [3], "b": [4]}, name="one")
    assert [r["metric"] for r in results] == [12]
    _, result = experiment.launch(product, {"a": 3, "b": 4}, name="scalars")
    assert result["metric"] == 12  # all scalars: one run, its return dict as before


def test_launch_lists_of_unequal_length_fail_before_spark(spark, root):
    with pytest.raises(HopsmlError, match="same length.*a: 2, b: 3"):
        experiment.launch(product, {"a": [1, 2], "b": [5, 3, 1]})
    assert not os.path.exists(root / "Projects" / "test" / "Experiments") or not os.listdir(
        root / "Projects" / "test" / "Experiments")


def test_a_failing_execution_fails_the_launch(spark, root):
    with pytest.raises(ExperimentFailed, match=r"1 of 2 executions .*ZeroDivisionError"):
        experiment.launch(lambda x: 1 / x, {"x": [1, 0]}, name="one-fails")


def write_events(lr=0.1):
    logdir = tensorboard.logdir()
    with open(os.path.join(logdir, "events.out.test"), "w") as f:
        f.write(str(lr))
    return {"metric": lr, "logdir": logdir}


@pytest.mark.parametrize("verb", ["launch", "grid_search", "allreduce"])
def test_local_logdir_is_copied_into_the_run(spark, root, verb):
    if verb == "launch":
        logdir, result = experiment.launch(write_events, {"lr": 0.1}, name="local", local_logdir=True)
        run_dir = logdir
    elif verb == "grid_search":
        logdir, best, result = experiment.grid_search(write_events, {"lr": [0.1]}, name="local", local_logdir=True)
        run_dir = _record(logdir)["best_logdir"]
    else:
        logdir, result = experiment.allreduce(write_events, name="local", local_logdir=True, num_workers=1)
        run_dir = logdir
    local = result["logdir"]
    assert not local.startswith(str(root)) and not os.path.exists(local)  # a local folder, removed after the copy
    assert open(os.path.join(run_dir, "tensorboard", "events.out.test")).read() == "0.1"


def test_local_logdir_false_writes_into_the_run(spark, root):
    logdir, result = experiment.launch(write_events, name="remote-style", local_logdir=False)
    assert result["logdir"] == os.path.join(logdir, "tensorboard", "")  # with hops' trailing "/"


def test_unpicklable_arguments_or_captures_fail_before_a_run_folder_exists(spark, root):
    import threading

    from hopsml.errors import SerializationError

    lock = threading.Lock()
    with pytest.raises(SerializationError, match=r"argument 'guard' \(lock\) cannot be sent"):
        experiment.launch(lambda guard: 1.0, {"guard": lock}, name="bad-args")

    def uses_a_lock():
        with lock:
            return 1.0

    with pytest.raises(SerializationError, match=r"function 'uses_a_lock' cannot be sent.*it uses 'lock'"):
        experiment.allreduce(uses_a_lock, name="bad-closure", num_workers=2)
    experiments = root / "Projects" / "test" / "Experiments"
    assert not experiments.exists() or not any(p.is_dir() for p in experiments.iterdir())  # no empty run folders left


def test_the_traceback_of_a_failing_function_is_shown_once(spark, root, capfd):
    from hopsml.errors import ExperimentFailed

    def fails():
        raise ValueError("shown only once")

    with pytest.raises(ExperimentFailed) as caught:
        experiment.launch(fails, name="once")
    shown = capfd.readouterr()
    text = shown.out + shown.err + str(caught.value)
    assert text.count('raise ValueError("shown only once")') == 1
    assert "the function raised ValueError: shown only once" in shown.out + shown.err


def test_a_run_given_its_settings_uses_them_and_leaves_the_environment_alone(spark, root, tmp_path):
    """A process that serves several projects (an Airflow worker) passes each run its own settings: the run goes
    to that project, not to the one HOPSML_ROOT/HOPSML_PROJECT name, and the environment stays as it was."""
    other = config.load(root=str(tmp_path / "other"), project="elsewhere")
    environment = dict(os.environ)
    logdir, result = experiment.launch(lambda lr: {"accuracy": lr}, {"lr": 0.25}, name="given", settings=other)
    searched, best, _ = experiment.grid_search(lambda x: {"metric": x}, {"x": [1, 2]}, name="given-search",
                                               settings=other)
    projects = tmp_path / "other" / "Projects" / "elsewhere" / "Experiments"
    assert os.path.dirname(logdir) == str(projects) and os.path.dirname(searched) == str(projects)
    assert result == {"accuracy": 0.25} and best == {"x": 2}
    assert not (root / "Projects" / "test" / "Experiments").exists()
    assert dict(os.environ) == environment
