"""A pipeline end to end under a real Airflow 3 (dag.test(), SQLite metadata, no services): prepare the bundled
iris table -> train (experiment.launch of an importable function) -> export -> create and start a serving ->
clients' traffic -> stop -> the monitor gate. Then a drifting serving whose gate fails the run, without retry;
and a step named wrongly, which fails its task at once. Real Spark, real files, real servings."""

from __future__ import annotations

import pytest

pytest.importorskip("airflow.sdk")   # the provider runs where the airflow extra is installed

from conftest import airflow, asset_events, dags_folder, run_dag, task_states, xcom

from hopsml.model import registry
from hopsml.serving.analysis.monitor import last_report
from hopsml.serving.control import lifecycle

HEADER = '''
import datetime as dt
import json
import urllib.request

from airflow.sdk import DAG, task

from hopsml.airflow import (CreateServingOperator, ExperimentOperator, ModelExportOperator, MonitorGateOperator,
                            PrepareDatasetOperator, StartServingOperator, StopServingOperator)


@task
def traffic(serving: str, shift: float) -> int:
    """The serving's clients: the train split's rows, with `shift` added to sepal_width."""
    from hopsml.data import reader
    from hopsml.serving.control import lifecycle

    s = lifecycle.get(serving)
    rows = [row for batch in reader("iris", split="train", shuffle=False) for row in batch["features"].tolist()]
    for row in rows:
        row[1] += shift
    url = f"http://{s.internal_ips[0]}:{s.internal_port}/v1/models/{serving}:predict"
    for start in range(0, len(rows), 25):
        body = json.dumps({"instances": rows[start:start + 25]}).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()
    return len(rows)


def serve_and_gate(serving, shift, model_version=None):
    create = CreateServingOperator(task_id="serve", serving_name=serving, model_name="iris",
                                   model_version=model_version, options={"inference_log": {"roll_seconds": 3600}})
    start = StartServingOperator(task_id="start", serving_name=serving, timeout_s=180)
    stop = StopServingOperator(task_id="stop", serving_name=serving, trigger_rule="all_done")
    gate = MonitorGateOperator(task_id="gate", serving_name=serving, psi_threshold=0.2, ks_threshold=0.2)
    clients = traffic(serving, shift)
    create >> start >> clients >> stop >> gate
    return create
'''

PIPELINE = HEADER + '''
with DAG("iris_pipeline", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False,
         default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=1)}) as dag:
    prepare = PrepareDatasetOperator(task_id="prepare", src=CSV, dataset="iris",
                                     options={"label": "species", "standardize": True})
    train = ExperimentOperator(task_id="train", function="iris_model:train", args={"dataset": "iris", "c": 1.0},
                               name="iris", options={"seed": 7})
    export = ModelExportOperator(task_id="export", model_name="iris", experiment_id=train.output["experiment_id"],
                                 model_file="model.joblib")
    prepare >> train >> export >> serve_and_gate("iris", 0.0, export.output["version"])
'''

DRIFTING = HEADER + '''
with DAG("iris_drifting", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False,
         default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=1)}) as dag:
    serve_and_gate("irisdrifting", 1.5)
'''

MISNAMED = '''
import datetime as dt

from airflow.sdk import DAG

from hopsml.airflow import ExperimentOperator, ModelExportOperator

with DAG("misnamed", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False,
         default_args={"retries": 3, "retry_delay": dt.timedelta(seconds=1)}) as dag:
    ExperimentOperator(task_id="train", function="iris_model:no_such_function", name="iris")
    ModelExportOperator(task_id="export", model_name="iris", experiment_id="local-0_404", model_file="m.joblib")
'''


@pytest.fixture(scope="module")
def pipeline(project, tmp_path_factory):
    from hopsml.data import samples

    csv = tmp_path_factory.mktemp("data") / "iris.csv"
    samples.write_table(str(csv), bad_rows=False)
    return project, run_dag("iris_pipeline", PIPELINE.replace("CSV,", repr(str(csv)) + ","))


def test_the_pipeline_prepares_trains_exports_serves_and_passes_its_gate(pipeline):
    settings, dag_run = pipeline
    assert str(dag_run.state) == "success", task_states(dag_run)
    trained = xcom(dag_run, "train")
    mv = registry.get_model("iris", settings=settings)
    assert mv.version == 1 and mv.experiment["id"] == trained["experiment_id"]
    assert mv.metrics["accuracy"] == trained["metrics"]["accuracy"] > 0.8
    assert [d["name"] for d in mv.datasets] == ["iris"]          # the run's lineage reached the model
    assert xcom(dag_run, "export") == {"model": "iris", "version": 1, "path": mv.path, "metrics": mv.metrics,
                                       "experiment_id": trained["experiment_id"]}
    assert xcom(dag_run, "train", "experiment_id") == trained["experiment_id"]   # key by key too
    report = last_report("iris", settings)
    assert report["rows"] == xcom(dag_run, "traffic") and report["drifted"] == []
    assert xcom(dag_run, "gate")["drifted"] == [] and lifecycle.get_status("iris", settings) == "Stopped"


def test_what_passes_between_tasks_is_references_not_data(pipeline):
    _, dag_run = pipeline
    for task_id in ("prepare", "train", "export", "serve", "start", "stop", "gate"):
        assert len(repr(xcom(dag_run, task_id))) < 600, task_id
    assert xcom(dag_run, "prepare")["rows"] == {"train": 119, "test": 31} or sum(
        xcom(dag_run, "prepare")["rows"].values()) == 150


def test_each_step_emits_an_event_on_the_asset_named_after_its_object(pipeline):
    settings, _ = pipeline
    p = settings.project
    assert asset_events(f"hopsml://{p}/models/iris") == [{"version": 1}]
    assert len(asset_events(f"hopsml://{p}/datasets/iris")) == 1
    assert len(asset_events(f"hopsml://{p}/experiments/iris")) == 1
    assert asset_events(f"hopsml://{p}/servings/iris")[0] == {"model": "iris", "version": 1}


def test_a_drifting_serving_fails_its_gate_and_the_run_without_a_retry(pipeline):
    settings, _ = pipeline
    dag_run = run_dag("iris_drifting", DRIFTING)
    assert str(dag_run.state) == "failed"
    states = task_states(dag_run)
    assert states["gate"] == ("failed", 1)                      # retries=2, but a gate failing is final
    assert states["stop"][0] == "success" and lifecycle.get_status("irisdrifting", settings) == "Stopped"
    report = last_report("irisdrifting", settings)
    assert "sepal_width" in report["drifted"]


def test_a_misnamed_function_or_experiment_fails_its_task_at_once(project):
    dag_run = run_dag("misnamed", MISNAMED)
    assert str(dag_run.state) == "failed"
    states = task_states(dag_run)
    assert states["train"] == ("failed", 1) and states["export"] == ("failed", 1)


def _cli(*argv: str, settings) -> str:
    import argparse

    from hopsml.airflow import commands

    parser = argparse.ArgumentParser()
    commands.add_commands(parser.add_subparsers(dest="command"))
    return commands.run(parser.parse_args(list(argv)), settings)


def test_the_dag_written_from_lineage_reproduces_the_model_version(pipeline):
    """`hopsml pipelines dag iris` writes the DAG, with the canary rollout to the serving; without it (`--serving
    none`, the serving is stopped here and gets no traffic) `airflow dags test` runs it in a process of its own:
    the dataset prepared again, the experiment run again with its recorded function, parameters and seed, a
    version 2 with the same accuracy. (tests/pipelines/test_retrain_loop.py runs the canary part.)"""
    from hopsml.fs import Storage
    from hopsml.tracking.record import read_record

    settings, _ = pipeline
    v1 = registry.get_model("iris", 1, settings=settings)
    path = dags_folder() / "retrain_iris.py"
    said = _cli("pipelines", "dag", "iris", "--serving", "iris", "-o", str(path), settings=settings)
    assert said.startswith(f"wrote {path}")
    source = path.read_text()
    compile(source, str(path), "exec")
    for part in ("PrepareDatasetOperator(", "'iris_model:train'", "{'dataset': 'iris', 'c': 1.0}", "'seed': 7",
                 'experiment_id=train.output["experiment_id"]', "DeployCanaryOperator(",
                 "prepare_iris >> train >> export >> canary >> canary_requests >> canary_gate >> rollout >> check"):
        assert part in source, part
    with pytest.raises(Exception, match="exists already"):
        _cli("pipelines", "dag", "iris", "-o", str(path), settings=settings)
    _cli("pipelines", "dag", "iris", "--serving", "none", "-o", str(path), "--force", settings=settings)
    assert "    prepare_iris >> train >> export\n" in path.read_text()

    done = airflow("dags", "test", "retrain_iris")
    assert done.returncode == 0 and "state=success" in done.stdout + done.stderr, (done.stdout + done.stderr)[-4000:]
    v2 = registry.get_model("iris", settings=settings)
    assert v2.version == 2 and v2.experiment["id"] != v1.experiment["id"]
    assert v2.metrics == v1.metrics                       # same data, parameters and seed: the same model on CPU
    rerun = read_record(Storage(settings.root), settings.project, v2.experiment["id"])
    assert rerun.hyperparameters == {"dataset": "iris", "c": 1.0} and rerun.seed == 7


SENSORS = '''
import datetime as dt

from airflow.sdk import DAG

from hopsml.airflow import DatasetSensor, ModelVersionSensor, ServingStateSensor

with DAG("iris_sensors", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False) as dag:
    DatasetSensor(task_id="dataset", name="iris", mode="poke", poke_interval=1, timeout=60)
    ModelVersionSensor(task_id="model", name="iris", min_version=1, mode="poke", poke_interval=1, timeout=60)
    ServingStateSensor(task_id="serving", serving_name="iris", state="Stopped", mode="poke", poke_interval=1,
                       timeout=60)
'''


def test_sensors_find_the_dataset_the_model_version_and_the_serving_state(pipeline):
    settings, _ = pipeline
    dag_run = run_dag("iris_sensors", SENSORS)
    assert str(dag_run.state) == "success", task_states(dag_run)
    assert xcom(dag_run, "dataset")["dataset"] == "iris"
    assert xcom(dag_run, "model")["version"] == registry.get_model("iris", settings=settings).version
    assert xcom(dag_run, "serving") == {"serving": "iris", "status": "Stopped", "model": "iris",
                                        "version": lifecycle.get("iris", settings).model_version}
