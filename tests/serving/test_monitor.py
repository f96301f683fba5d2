"""Skew and drift: a model trained (in a run) on a table prepare_table made, served; what the serving logged is
compared with the dataset's statistics: same rows, no drift; shifted rows, drift on the shifted feature;
raw rows where the transform standardizes, a preprocessing mismatch. Real Spark prepares the table once."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import base_url, http, running, settings_for

from hopsml import layout
from hopsml.data import prepare_table, samples
from hopsml.data.readers import reader
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.serving import lifecycle
from hopsml.serving.monitor import js, ks, monitor, psi
from hopsml.tracking.run_context import active_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory, spark):
    """(root, train features, raw train rows): iris prepared (standardized, petal_size indexed) and a logistic
    regression exported from a run that read the train split, so its lineage names the dataset."""
    import joblib
    from sklearn.linear_model import LogisticRegression

    base = tmp_path_factory.mktemp("monitor")
    root = base / "root"
    settings = settings_for(root)
    csv = str(base / "iris.csv")
    samples.write_table(csv, bad_rows=False)
    prepare_table(csv, "iris", label="species", standardize=True, settings=settings, spark=spark)
    storage = Storage(settings.root)
    with active_run(storage, layout.ExperimentDir.of("test", "local-1", 1)):
        batches = list(reader("iris", split="train", shuffle=False, settings=settings))
        features = np.concatenate([b["features"] for b in batches]).astype(np.float64)
        labels = np.concatenate([b["label"] for b in batches])
        joblib.dump(LogisticRegression(max_iter=500).fit(features, labels), str(base / "model.joblib"))
        registry.export(str(base / "model.joblib"), "iris", settings=settings)
    transform = storage.read_json(layout.join(layout.dataset_dir("test", "iris"), "transform.json"))
    means = np.array([transform["numeric"][n]["mean"] for n in transform["features"][:4]])
    stds = np.array([transform["numeric"][n]["std"] for n in transform["features"][:4]])
    raw = features.copy()
    raw[:, :4] = raw[:, :4] * stds + means   # the rows as the CSV had them, before the transform
    return root, features, raw


def _serve(settings, name: str, rows: np.ndarray) -> None:
    lifecycle.create_or_update(name, "Models/iris", "PYTHON", inference_log_roll_seconds=3600, settings=settings)
    with running(settings, name) as serving:
        for start in range(0, len(rows), 25):
            status, _ = http("POST", base_url(serving) + ":predict", {"instances": rows[start:start + 25].tolist()})
            assert status == 200


def test_the_training_rows_served_show_no_drift_and_matching_preprocessing(trained):
    root, features, _ = trained
    settings = settings_for(root)
    _serve(settings, "same", features)
    report = monitor("same", settings=settings)
    assert report["dataset"]["name"] == "iris"   # from the model's lineage
    assert report["rows"] == len(features) and report["drifted"] == []
    assert report["preprocessing"] == {"ok": True, "problems": []}
    names = [f["name"] for f in report["features"]]
    assert names == ["sepal_length", "sepal_width", "petal_length", "petal_width", "petal_size"]
    for feature in report["features"]:
        assert feature["psi"] < 0.01 and feature["ks"] < 0.01, feature
    assert report["features"][4]["kind"] == "category"
    written = Storage(settings.root).read_json(layout.ServingDir.of("test", "same").monitor_report)
    assert written["features"] == json.loads(json.dumps(report["features"]))


def test_a_shifted_feature_drifts_alone(trained):
    root, features, _ = trained
    settings = settings_for(root)
    shifted = features.copy()
    shifted[:, 1] += 1.5   # sepal_width, 1.5 standard deviations up
    _serve(settings, "shifted", shifted)
    report = monitor("shifted", settings=settings)
    assert report["drifted"] == ["sepal_width"]
    width = report["features"][1]
    assert width["psi"] > 0.2 and width["ks"] > 0.15 and width["js"] > 0.1
    assert report["preprocessing"]["ok"]


def test_raw_inputs_where_training_standardized_are_a_preprocessing_mismatch(trained):
    root, _, raw = trained
    settings = settings_for(root)
    _serve(settings, "raw", raw)
    report = monitor("raw", settings=settings)
    assert not report["preprocessing"]["ok"]
    flagged = {p.split(":")[0] for p in report["preprocessing"]["problems"]}
    numeric = {"sepal_length", "sepal_width", "petal_length", "petal_width"}
    assert flagged == numeric | {"untransformed rows"}
    assert "untransformed" in report["preprocessing"]["problems"][0]
    assert f"{len(raw)} of {len(raw)} served rows" in report["preprocessing"]["problems"][-1]
    assert set(report["drifted"]) == numeric
    text = _cli(settings, "serving", "monitor", "raw")
    assert "preprocessing: MISMATCH" in text and "sepal_length" in text and "DRIFT" in text


def _cli(settings, *argv: str) -> str:
    import contextlib
    import io

    from hopsml import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--root", settings.root, "--project", settings.project, *argv]) == 0
    return out.getvalue()


def test_some_clients_sending_raw_rows_among_transformed_ones_are_caught(trained):
    root, features, raw = trained
    settings = settings_for(root)
    _serve(settings, "mixed", np.concatenate([features, raw[:20]]))
    report = monitor("mixed", settings=settings)
    assert not report["preprocessing"]["ok"]
    assert any(f"20 of {len(features) + 20} served rows" in p for p in report["preprocessing"]["problems"])


def test_psi_ks_and_js_of_histograms():
    assert psi([10, 20, 30], [10, 20, 30]) == 0.0
    assert ks([10, 20, 30], [10, 20, 30]) == 0.0
    assert js([1, 0], [0, 1]) == pytest.approx(1.0)
    assert psi([50, 50, 0], [50, 49, 1]) > psi([50, 50, 0], [50, 50, 0])


def test_a_model_trained_on_a_feature_views_training_dataset_is_monitored_against_it(tmp_path):
    """Lineage from the feature store: iris in a feature group, a view with a scaler, a training dataset
    written out, a model exported from a run that read it; monitor takes the training dataset's statistics."""
    pytest.importorskip("deltalake")
    import datetime as dt

    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    from hopsml.featurestore.store import FeatureStore
    from hopsml.hopsworks.hsfs.builtin_transformations import standard_scaler

    settings = settings_for(tmp_path / "root")
    frame = load_iris(as_frame=True).frame.rename(columns=lambda c: c.replace(" (cm)", "").replace(" ", "_"))
    frame["flower"] = range(len(frame))
    frame["seen"] = [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=i) for i in frame.index]
    fs = FeatureStore(settings)
    flowers = fs.create_feature_group("flowers", primary_key=["flower"], event_time="seen")
    flowers.insert(frame)
    view = fs.create_feature_view("species", query=flowers.select_all(), labels=["target"],
                                  transformation_functions=[standard_scaler("petal_length")])
    version, _ = view.create_train_test_split(test_size=0.2, seed=1)
    name = view.training_dataset_name(version)
    storage = Storage(settings.root)
    with active_run(storage, layout.ExperimentDir.of("test", "local-1", 2)):
        batches = list(reader(name, split="train", shuffle=False, settings=settings))
        features = np.concatenate([b["features"] for b in batches]).astype(np.float64)
        labels = np.concatenate([b["label"] for b in batches])
        joblib.dump(LogisticRegression(max_iter=500).fit(features, labels), str(tmp_path / "model.joblib"))
        registry.export(str(tmp_path / "model.joblib"), "iris", settings=settings)
    _serve(settings, "fvsame", features)
    report = monitor("fvsame", settings=settings)
    assert report["dataset"]["name"] == name             # from the model's lineage: the training dataset
    assert [f["name"] for f in report["features"]] == ["sepal_length", "sepal_width", "petal_width",
                                                       "standard_scaler_petal_length_"]
    assert report["drifted"] == [] and report["preprocessing"]["ok"]
    shifted = features.copy()
    shifted[:, 3] += 2.0                                 # the scaled petal length, two standard deviations up
    _serve(settings, "fvshifted", shifted)
    assert monitor("fvshifted", settings=settings)["drifted"] == ["standard_scaler_petal_length_"]


def test_kserve_v2_requests_json_and_binary_are_monitored_as_v1_rows_are(trained):
    """v2 tensors were logged as they came (a list of tensors, or binary bytes) and the monitor saw no rows in
    them; the rows the model got are logged now, so the training rows served over v2 show no drift."""
    httpclient = pytest.importorskip("tritonclient.http")
    root, features, _ = trained
    settings = settings_for(root)
    lifecycle.create_or_update("overv2", "Models/iris", "PYTHON", inference_log_roll_seconds=3600, settings=settings)
    half = len(features) // 2
    with running(settings, "overv2") as serving:
        url = f"http://{serving.internal_ips[0]}:{serving.internal_port}/v2/models/overv2/infer"
        for start in range(0, half, 25):
            chunk = features[start:min(start + 25, half)]
            status, _ = http("POST", url, {"inputs": [{"name": "input-0", "shape": list(chunk.shape),
                                                       "datatype": "FP64", "data": chunk.ravel().tolist()}]})
            assert status == 200
        client = httpclient.InferenceServerClient(f"{serving.internal_ips[0]}:{serving.internal_port}")
        for start in range(half, len(features), 25):
            tensor = httpclient.InferInput("input-0", list(features[start:start + 25].shape), "FP64")
            tensor.set_data_from_numpy(features[start:start + 25])   # binary, as the client sends by default
            client.infer("overv2", [tensor])
        client.close()
    report = monitor("overv2", settings=settings)
    assert report["rows"] == len(features) and report["drifted"] == []
    assert report["preprocessing"] == {"ok": True, "problems": []}
