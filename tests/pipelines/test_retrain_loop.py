"""The retraining loop a user generates with `hopsml pipelines dag MODEL`, run with no edits (dag.test(), real
Spark, real servings): an online feature group of a small wage panel, a view with transformations, a model trained
by a function that reads its training dataset through a parameter's default, registered with the view through
hsml's face, served by a predictor that looks features up online for key-only requests. Two new commits, then the
DAG: a new training dataset -> the function re-run on it -> a new version with its view and training dataset ->
a canary with the serving's whole definition -> the canary's own requests -> the gate -> promote -> check, the
serving answering the clients' key-only requests all along. Then a canary whose served features skew from its
training data is rolled back and the old version answers on; and a model whose function cannot be re-run is
refused when its DAG is written."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("airflow.sdk")   # the provider runs where the airflow extra is installed

from conftest import dags_folder, run_dag, task_states, xcom

from hopsml.airflow import commands, steps
from hopsml.model import registry
from hopsml.serving import InferenceLog
from hopsml.serving.control import canary, lifecycle

PREDICTOR = '''
import os

import joblib

from hopsml import hopsworks


class Predict:
    """Key-only requests: each row names a worker; the features come from the online store, transformed with the
    statistics of the training dataset version this model version was trained on (its hsml record)."""

    def __init__(self):
        folder = os.environ["MODEL_FILES_PATH"]
        model = hopsworks.login().get_model_registry().get_model("wages", int(os.path.basename(folder.rstrip("/"))))
        self.fv = model.get_feature_view(init=False)
        self.fv.init_serving(model.training_dataset_version)
        self.model = joblib.load(os.path.join(folder, "model.joblib"))

    def predict(self, inputs):
        x = self.fv.get_feature_vectors([{"nr": int(row[0])} for row in inputs], return_type="numpy")
        return self.model.predict(x).tolist()
'''


def _workers(first: int, count: int, seed: int, exper_shift: float = 0.0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    exper = rng.uniform(0, 20, count) + exper_shift
    union = rng.choice(["yes", "no"], count)
    hours = rng.normal(2000, 300, count).round(0)
    high = ((exper / 20 + (union == "yes") * 0.5 + rng.normal(0, 0.2, count)) > 0.8).astype(int)
    return pd.DataFrame({"nr": np.arange(first, first + count), "exper": exper, "hours": hours, "union": union,
                         "high": high})


class Clients(threading.Thread):
    """The serving's clients: key-only requests, one worker each, in a loop until stopped; every answer's status
    (a connection refused while the serving restarts is retried, and counted)."""

    def __init__(self, settings, keys):
        super().__init__(daemon=True)
        self.settings, self.keys = settings, list(keys)
        self.answers: list[tuple[float, int]] = []
        self.refused = 0
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        import numpy as np

        order = np.random.default_rng(0).permutation(len(self.keys)).tolist() * 10   # keys at random
        i = 0
        while not self.halt.is_set():
            s = lifecycle.get("wages", self.settings)
            if s.internal_port is None:   # restarting
                self.refused += 1
                self.halt.wait(0.05)
                continue
            body = json.dumps({"instances": [[self.keys[order[i % len(order)]]]]}).encode()
            url = f"http://{(s.internal_ips or ['127.0.0.1'])[0]}:{s.internal_port}/v1/models/wages:predict"
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"}, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    predictions = json.loads(answer.read())["predictions"]
                    self.answers.append((time.time(), 200 if len(predictions) == 1 else 0))
                    i += 1
            except urllib.error.HTTPError as exc:
                self.answers.append((time.time(), exc.code))
                i += 1
            except (urllib.error.URLError, OSError):
                self.refused += 1
            except Exception as exc:   # noqa: BLE001 (a client that dies would hide why the canary got no traffic)
                self.errors.append(repr(exc))
            self.halt.wait(0.005)

    def stop(self) -> list[tuple[float, int]]:
        self.halt.set()
        self.join(timeout=60)
        return self.answers


def _traffic(settings) -> dict:
    """Answered requests per model version in the serving's inference log (for failure messages)."""
    from collections import Counter

    from hopsml.serving.instance import inference_log

    table = inference_log.read(inference_log.inference_log_path(settings, settings.project, "wages"),
                               ["model_version", "status"])
    return dict(Counter(zip(table.column("model_version").to_pylist(), table.column("status").to_pylist())))


def _cli(settings, *argv: str) -> str:
    import argparse

    parser = argparse.ArgumentParser()
    commands.add_commands(parser.add_subparsers(dest="command"))
    return commands.run(parser.parse_args(["pipelines", *argv]), settings)


def _dag(settings, dag_id: str) -> str:
    path = dags_folder() / f"{dag_id}.py"
    _cli(settings, "dag", "wages", "-o", str(path), "--dag-id", dag_id, "--force", "--min-requests", "200",
         "--canary-percent", "50", "--poke-interval", "1", "--canary-timeout", "120",
         "--max-p99-ratio", "20")   # latency on a busy test machine says little
    return path.read_text()


@pytest.fixture(scope="module")
def loop(project, tmp_path_factory):
    """The user's side before the DAG: the group, the view, version 1 trained and served; then two commits."""
    import wage_model

    from hopsml import experiment, hopsworks, layout
    from hopsml.featurestore.store import FeatureStore
    from hopsml.featurestore.transformations import one_hot_encoder, standard_scaler
    from hopsml.fs import Storage

    settings = project
    store = FeatureStore(settings)
    group = store.create_feature_group("wages", primary_key=["nr"], online_enabled=True)
    group.insert(_workers(0, 600, seed=1))
    view = store.create_feature_view("wageview", query=group.select_all(), labels=["high"],
                                     transformation_functions=[standard_scaler("exper"), one_hot_encoder("union")])
    version, _ = view.create_train_test_split(test_size=0.25, seed=3)
    assert view.training_dataset_name(version) == wage_model.FIRST_TRAINING_DATASET
    logdir, result = experiment.launch(wage_model.train, name="wages", seed=7)
    mr = hopsworks.login().get_model_registry()
    model = mr.sklearn.create_model("wages", metrics={"accuracy": result["accuracy"]}, feature_view=view,
                                    training_dataset_version=version)
    model.save(logdir.rstrip("/") + "/tensorboard/model.joblib")   # where tensorboard.logdir() put it
    script = tmp_path_factory.mktemp("scripts") / "predict_wages.py"
    script.write_text(PREDICTOR)
    Storage(settings.root).upload(str(script), layout.join(layout.project_dir(settings.project), "Resources",
                                                           "predict_wages.py"))
    lifecycle.create_or_update("wages", "Models/wages", "PYTHON", 1, predictor="Resources/predict_wages.py",
                               inference_logging="ALL", instances=1,
                               predictor_resource_config={"memory": 512, "cores": 1},
                               inference_log=InferenceLog(roll_seconds=1), max_body_bytes=1 << 20, settings=settings)
    lifecycle.start("wages", timeout_s=180, settings=settings)
    before = lifecycle.make_inference_request("wages", [[3], [4]], settings=settings)
    assert len(before["predictions"]) == 2                      # key-only requests, answered
    group.insert(_workers(600, 100, seed=2))                    # two new commits: new workers
    group.insert(_workers(700, 100, seed=4))
    return settings


def test_the_generated_dag_retrains_on_the_new_commits_and_promotes_a_canary_while_the_serving_answers(loop):
    settings = loop
    defined = lifecycle.get("wages", settings)
    source = _dag(settings, "retrain_wages")
    for part in ("TrainingDatasetOperator(", "'dataset': training_dataset_wageview.output[\"dataset\"]",
                 "DeployCanaryOperator(", "CanaryRequestsSensor(", "CanaryGateOperator(", "CanaryRolloutOperator(",
                 "ServingCheckOperator(", "Asset('hopsml://pipes/featuregroups/wages/1')"):
        assert part in source, part
    clients = Clients(settings, range(800))
    clients.start()
    try:
        dag_run = run_dag("retrain_wages", source)
    finally:
        answers = clients.stop()
    assert str(dag_run.state) == "success", (task_states(dag_run), _traffic(settings), len(answers), clients.refused,
                                             clients.errors[:3], [s for _, s in answers][-5:])
    states = task_states(dag_run)
    assert states and all(s == "success" for s, _ in states.values()), json.dumps(states)
    # the new training dataset holds the new commits' rows, and the run read it (not td1, its default)
    made = xcom(dag_run, "training_dataset_wageview")
    assert made["dataset"] == "wageview_1_td2"
    td2 = registry.get_model("wages", 2, settings=settings)
    assert [d["name"] for d in td2.datasets] == ["wageview_1_td2"] == xcom(dag_run, "train")["datasets"]
    from hopsml.featurestore.store import FeatureStore

    fv = FeatureStore(settings).get_feature_view("wageview", 1)
    rows = fv.get_training_datasets()[1]["rows"]
    assert sum(rows.values()) == 800 and sum(fv.get_training_datasets()[0]["rows"].values()) == 600
    # the new version keeps its lineage: the hsml record get_feature_view() reads, with td 2's statistics
    from hopsml import hopsworks

    model = hopsworks.login().get_model_registry().get_model("wages", 2)
    assert model.training_dataset_version == 2
    view = model.get_feature_view()
    assert view.name == "wageview" and view._scoring == 2
    means = [f.to_dict() for f in view.transformation_functions]
    assert means != [f.to_dict() for f in fv._fitted(1)]        # td 2's fitted statistics, not td 1's
    # promoted after the canary's own requests; the definition carried over whole
    decision = canary.last_decision("wages", settings)
    assert decision["decision"] == "promoted" and decision["canary"] == 2, decision
    assert decision["figures"]["canary"]["requests"] >= 200
    after = lifecycle.get("wages", settings)
    assert (after.model_version, after.canary_version) == (2, None)
    for kept in ("predictor", "inference_logging", "requested_instances", "predictor_resource_config",
                 "batching_enabled"):
        assert getattr(after, kept) == getattr(defined, kept), kept
    from hopsml.fs import Storage
    from hopsml.serving import definition as defs

    d = defs.read(Storage(settings.root), settings.project, "wages")
    assert (d.inference_log_roll_seconds, d.max_body_bytes) == (1, 1 << 20)
    # the clients' key-only requests were answered before, during and after the canary, by both versions
    assert answers and all(status == 200 for _, status in answers), [s for _, s in answers if s != 200][:5]
    assert xcom(dag_run, "check")["version"] == 2
    assert len(lifecycle.make_inference_request("wages", [[1], [99]], settings=settings)["predictions"]) == 2


def test_a_canary_whose_served_features_skew_is_rolled_back_and_the_old_version_answers_on(loop):
    settings = loop
    group_rows = _workers(800, 20, seed=5, exper_shift=400.0)    # far outside what training saw
    from hopsml.featurestore.store import FeatureStore

    FeatureStore(settings).get_feature_group("wages", 1).insert(group_rows)
    source = _dag(settings, "retrain_wages_again")              # from version 2's lineage, which the DAG made
    assert "'dataset': training_dataset_wageview.output[\"dataset\"]" in source
    clients = Clients(settings, range(800, 820))                  # the clients now ask for the shifted workers
    clients.start()
    try:
        dag_run = run_dag("retrain_wages_again", source)
    finally:
        answers = clients.stop()
    states = task_states(dag_run)
    assert str(dag_run.state) == "failed" and states["rollout"] == ("failed", 1), json.dumps(states)
    assert states["canary_gate"][0] == "success" and states["check"] == ("failed", 1)   # answers, on version 2
    decision = canary.last_decision("wages", settings)
    assert decision["decision"] == "rolled back" and decision["canary"] == 3, decision
    assert any("skew from its training dataset" in r for r in decision["reasons"]), decision["reasons"]
    after = lifecycle.get("wages", settings)
    assert (after.model_version, after.canary_version) == (2, None)
    assert answers and all(status == 200 for _, status in answers)
    assert len(lifecycle.make_inference_request("wages", [[805]], settings=settings)["predictions"]) == 1


def test_a_model_whose_function_cannot_be_rerun_is_refused_with_the_reason(project):
    from hopsml import experiment

    def train():   # defined in a function: no module a worker could import it from
        from hopsml import tensorboard

        with open(tensorboard.logdir() + "model.txt", "w") as handle:
            handle.write("m")
        return {"accuracy": 1.0}

    settings = project
    logdir, _ = experiment.launch(train, name="local")
    exp_id = logdir.rstrip("/").rsplit("/", 1)[-1]
    steps.export_model(settings, "localmodel", exp_id, model_file="model.txt")
    with pytest.raises(steps.StepError, match=r"cannot be re-run.*<locals>|<locals>.*cannot be re-run"):
        _cli(settings, "dag", "localmodel")


def test_a_model_trained_on_an_in_memory_split_is_monitorable_and_its_dag_splits_the_view_again(project):
    import wage_model

    from hopsml import experiment, hopsworks
    from hopsml.featurestore.store import FeatureStore
    from hopsml.featurestore.transformations import one_hot_encoder, standard_scaler
    from hopsml.serving.analysis.monitor import monitor

    settings = project
    store = FeatureStore(settings)
    group = store.create_feature_group("splitwages", primary_key=["nr"])
    group.insert(_workers(0, 200, seed=6))
    fv = store.create_feature_view("wagesplit", query=group.select_all(), labels=["high"],
                                   transformation_functions=[standard_scaler("exper"), one_hot_encoder("union")])
    logdir, _ = experiment.launch(wage_model.train_in_memory, name="insplit", seed=7)
    exp_id = logdir.rstrip("/").rsplit("/", 1)[-1]
    steps.export_model(settings, "splitmodel", exp_id, model_file="model.joblib")
    mv = registry.get_model("splitmodel", settings=settings)
    assert [(d["name"], d["view"], d["training_dataset_version"], d["in_memory"]) for d in mv.datasets] == [
        ("wagesplit_1_td1", "wagesplit", 1, True)]
    record = fv.get_training_datasets()[0]
    assert record["features"] and set(record["statistics"]["splits"]) == {"train", "test"}
    assert hopsworks.login().get_model_registry().get_model("splitmodel", 1).get_feature_view().name == "wagesplit"
    x = fv.get_train_test_split(1)[0].to_numpy(dtype=float)[:40].tolist()
    lifecycle.create_or_update("splitwages", "Models/splitmodel", "PYTHON", 1,
                               inference_log=InferenceLog(roll_seconds=1),
                               settings=settings)
    lifecycle.start("splitwages", timeout_s=180, settings=settings)
    try:
        assert len(lifecycle.make_inference_request("splitwages", x, settings=settings)["predictions"]) == 40
    finally:
        lifecycle.stop("splitwages", settings=settings)
    report = monitor("splitwages", settings=settings)               # was "lineage: none"
    assert report["dataset"]["name"] == "wagesplit_1_td1" and report["rows"] == 40
    assert [f["name"] for f in report["features"]] == record["features"]   # compared with its statistics
    source = _cli(settings, "dag", "splitmodel", "--serving", "splitwages")
    assert "TrainingDatasetOperator(" not in source and "reads_view={'name': 'wagesplit'" in source
    assert "Asset('hopsml://pipes/featuregroups/splitwages/1')" in source
