"""Deployments as hsml has them, on hopsml's serving: a model trained on a feature view's training dataset is
deployed with `model.deploy(script_file=...)`, its hsml-style predictor looks each request's features up
online with `fv.get_feature_vector`, and the answers are the model's on the training transform of the online
rows; the deployment starts, answers, reports its state and logs, stops and is deleted; its inference log kept
the vectors the model got, which serving.monitor compares with the training dataset's statistics."""

from __future__ import annotations

import datetime as dt
import textwrap

import numpy as np
import pandas as pd
import pytest
from conftest import settings_for
from own_processes import processes_of_this_test

pytest.importorskip("deltalake")

PREDICTOR = textwrap.dedent("""
    import os

    import joblib

    from hopsml import hopsworks


    class Predict:
        def __init__(self):
            project = hopsworks.login()
            self.fv = project.get_feature_store().get_feature_view("limits", 1)
            self.fv.init_serving(1)   # the training dataset version the model was trained on
            self.model = joblib.load(os.path.join(os.environ["MODEL_FILES_PATH"], "model.joblib"))

        def predict(self, inputs):
            entries = [{"customer": int(row[0])} for row in inputs]
            vectors = self.fv.get_feature_vectors(entries, return_type="numpy")
            return self.model.predict(vectors.astype(float)).tolist()
""")


def test_a_deployment_whose_predictor_looks_features_up_online(tmp_path, monkeypatch):
    import joblib
    from sklearn.linear_model import LinearRegression

    from hopsml import hopsworks
    from hopsml.hopsworks.deployments import InferenceLogger, Resources
    from hopsml.hopsworks.hsfs.builtin_transformations import min_max_scaler

    settings = settings_for(tmp_path / "root")
    monkeypatch.setenv("HOPSML_ROOT", settings.root)
    monkeypatch.setenv("HOPSML_PROJECT", "test")   # login(project=) sets it for the process: undone after the test
    project = hopsworks.login(project="test")
    fs = project.get_feature_store()
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    rng = np.random.default_rng(0)
    profiles = fs.create_feature_group("profiles", primary_key=["customer"], event_time="ts", online_enabled=True)
    profiles.insert(pd.DataFrame({"customer": range(40), "ts": [t0] * 40, "income": rng.normal(50, 10, 40),
                                  "age": rng.integers(20, 70, 40)}))
    spend = fs.create_feature_group("spend", primary_key=["customer"], event_time="ts")
    spend.insert(pd.DataFrame({"customer": range(40), "ts": [t0 + dt.timedelta(days=1)] * 40,
                               "target": rng.normal(0, 1, 40)}))
    view = fs.create_feature_view("limits", query=spend.select(["target"]).join(   # key and time not features
        profiles.select(["income", "age"])), labels=["target"], transformation_functions=[min_max_scaler("income")])
    version, _ = view.create_training_data()       # written out: the statistics serving.monitor reads
    features, labels = view.get_training_data(version)
    fitted = LinearRegression().fit(features.to_numpy(dtype=float), labels["target"])
    (tmp_path / "model").mkdir()
    joblib.dump(fitted, tmp_path / "model" / "model.joblib")
    registry = project.get_model_registry()
    model = registry.sklearn.create_model("limits", feature_view=view, training_dataset_version=version)
    model.save(str(tmp_path / "model"))
    script = tmp_path / "predict_limits.py"
    script.write_text(PREDICTOR)

    deployment = model.deploy(name="limits", script_file=str(script), resources=Resources(num_instances=1),
                              inference_logger=InferenceLogger(mode="ALL"))
    ms = project.get_model_serving()
    assert ms.get_deployment("limits").model_version == model.version
    assert deployment.get_state().status == "Stopped"
    deployment.start(await_running=300)
    try:
        assert deployment.is_running()
        answer = deployment.predict(inputs=[[3], [17]])
        view.init_serving(1)
        expected = fitted.predict(view.get_feature_vectors([{"customer": 3}, {"customer": 17}],
                                                           return_type="numpy").astype(float))
        assert np.allclose(answer["predictions"], expected)
        with pytest.raises(Exception, match="no online row for \\{'customer': 99\\}"):
            deployment.predict(data={"instances": [[99]]})
        assert "no online row" in deployment.get_logs(tail=200)   # the failed request's error is in its log
        assert [d.name for d in ms.get_deployments(model)] == ["limits"]
    finally:
        deployment.stop()
    assert deployment.is_stopped()
    # the inference log kept the vectors the model got, so monitoring compares them with the training dataset
    from hopsml.serving import monitor

    report = monitor("limits", settings=settings)
    assert report["dataset"]["name"] == view.training_dataset_name(version)
    assert [f["name"] for f in report["features"]] == ["age", "min_max_scaler_income_"]
    assert report["rows"] == 2 and report["preprocessing"]["ok"], report
    deployment.delete()
    assert ms.get_deployments() == []


def test_a_deployment_with_a_canary_splits_promotes_and_rolls_back(tmp_path, monkeypatch):
    """hsml has no canary arguments: hopsml's deployments take `canary_version` and `canary_traffic_percent` (saved
    as create_or_update's `Canary`) on model.deploy / create_predictor, and `promote()` / `rollback()` end the canary of
    a started deployment, which restarts with the version it keeps."""
    import joblib
    from sklearn.dummy import DummyClassifier

    from hopsml import hopsworks
    from hopsml.serving.definition import ServingError

    settings = settings_for(tmp_path / "root")
    monkeypatch.setenv("HOPSML_ROOT", settings.root)
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    project = hopsworks.login(project="test")
    registry = project.get_model_registry()
    versions = []
    for answer in (0, 1):   # version 1 answers 0 for every row, version 2 answers 1
        folder = tmp_path / f"v{answer}"
        folder.mkdir()
        joblib.dump(DummyClassifier(strategy="constant", constant=answer).fit([[0.0]] * 2, [answer, 1 - answer]),
                    folder / "model.joblib")
        model = registry.sklearn.create_model("const")
        model.save(str(folder))
        versions.append(model)
    v1, v2 = versions
    ms = project.get_model_serving()
    with pytest.raises(ServingError, match="needs a canary_version"):
        ms.create_predictor(v1, canary_traffic_percent=20)
    with pytest.raises(ServingError, match="no version 9|version 9"):
        v1.deploy(name="const", canary_version=9)

    deployment = v1.deploy(name="const", canary_version=v2, canary_traffic_percent=30)   # a model version, or 2
    assert (deployment.model_version, deployment.canary_version, deployment.canary_traffic_percent) == (1, 2, 30)
    found = ms.get_deployment("const")
    assert (found.model_version, found.canary_version, found.canary_traffic_percent) == (1, 2, 30)
    before = processes_of_this_test()
    deployment.start(await_running=300)
    try:
        answers = [deployment.predict(inputs=[[1.0]])["predictions"][0] for _ in range(300)]
        assert 50 <= sum(answers) <= 130            # about 30% to the canary (90 expected; 4 sigma either side)
        deployment.promote()                         # version 2 takes every request; the deployment restarted
        assert deployment.is_running()
        assert (deployment.model_version, deployment.canary_version) == (2, None)
        assert {deployment.predict(inputs=[[1.0]])["predictions"][0] for _ in range(40)} == {1}

        again = ms.create_predictor(v2, name="const", canary_version=1, canary_traffic_percent=50).deploy()
        assert again.is_running() and (again.model_version, again.canary_version) == (2, 1)
        assert {again.predict(inputs=[[1.0]])["predictions"][0] for _ in range(100)} == {0, 1}
        again.rollback()                             # the canary (version 1) is dropped: version 2 answers alone
        assert (again.model_version, again.canary_version, again.canary_traffic_percent) == (2, None, None)
        assert {again.predict(inputs=[[1.0]])["predictions"][0] for _ in range(40)} == {1}
        with pytest.raises(ServingError, match="has no canary"):
            again.promote()
    finally:
        deployment.stop()
    assert deployment.is_stopped()
    assert not processes_of_this_test() - before
    from hopsml.serving.control import canary

    assert canary.last_decision("const", settings)["decision"] == "rolled back"
    deployment.delete()
