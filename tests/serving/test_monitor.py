"""Skew and drift: a model trained (in a run) on a table prepare_table made (iris, the numbers standardized and
petal_size a category), served; what the serving logged is compared with the dataset. Without a transformer the
model's inputs alone: the training rows show no drift, a shifted feature drifts alone, a shifted category mix is
flagged on its exact categories, raw rows read as untransformed. With a transformer the fitted transform is
applied to what clients sent and compared with what the model got: a transformer that applies it passes, one
that skips a feature is caught naming it, a category training never saw is named with its count. v1 rows, named
features, and KServe v2 tensors (JSON and the binary extension, as Triton's client sends them) alike. Real
Spark prepares the table once; every request goes to a started serving over HTTP."""

from __future__ import annotations

import json
import os
import textwrap
from collections import Counter

import numpy as np
import pytest
from conftest import base_url, http, running, settings_for

from hopsml import layout
from hopsml.data import prepare_table, samples
from hopsml.data.readers import reader
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.serving import InferenceLog
from hopsml.serving.analysis.monitor import _references, js, ks, monitor, psi
from hopsml.serving.control import lifecycle
from hopsml.serving.instance import inference_log
from hopsml.tracking.run_context import active_run

NUMERIC = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
SOURCES = [*NUMERIC, "petal_size"]

# hops' transformer script: the fitted transform of transform.json applied to rows of the training columns (lists
# in their order, or named), or to one v2 tensor per column; SKIP names the columns it leaves as they came
TRANSFORMER = '''
import json

import numpy as np

TRANSFORM = json.load(open({path!r}))
SOURCES = [c["name"] for c in TRANSFORM["columns"] if c["name"] != TRANSFORM["label"]["column"]]
SKIP = {skip!r}


def features(values):
    out = []
    for name, value in zip(SOURCES, values):
        if name in TRANSFORM["numeric"]:
            spec = TRANSFORM["numeric"][name]
            out.append(float(value) if name in SKIP else (float(value) - spec["mean"]) / spec["std"])
        else:
            categories = TRANSFORM["categorical"][name]["categories"]
            out.append(categories.index(str(value)) if str(value) in categories else -1)
    return out


class Transformer:
    def preprocess(self, body):
        if "instances" in body:
            rows = [[r[n] for n in SOURCES] if isinstance(r, dict) else r for r in body["instances"]]
            return {{"instances": [features(r) for r in rows]}}
        columns = {{t["name"]: np.asarray(t["data"]).reshape(-1).tolist() for t in body["inputs"]}}
        rows = [features([columns[n][i] for n in SOURCES]) for i in range(len(columns[SOURCES[0]]))]
        tensor = {{"name": "input-0", "shape": [len(rows), len(SOURCES)], "datatype": "FP64",
                   "data": [v for r in rows for v in r]}}
        return {{**body, "inputs": [tensor]}}

    def postprocess(self, body):
        return body
'''


@pytest.fixture(scope="module")
def trained(tmp_path_factory, spark):
    """(root, train features, raw train rows): iris prepared (standardized, petal_size indexed) and a logistic
    regression exported from a run that read the train split, so its lineage names the dataset. The raw rows
    are the CSV's values (one decimal, the category by name): the fitted transform makes the features of them."""
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
    assert transform["features"] == SOURCES
    means = np.array([transform["numeric"][n]["mean"] for n in NUMERIC])
    stds = np.array([transform["numeric"][n]["std"] for n in NUMERIC])
    categories = transform["categorical"]["petal_size"]["categories"]
    raw = [[*np.round(row[:4] * stds + means, 1).tolist(), categories[int(row[4])]] for row in features]
    return root, features, raw


def _transformer(settings, name: str, skip: tuple[str, ...] = ()) -> str:
    """A transformer script in the project's Resources (see TRANSFORMER); its project-relative path."""
    resources = os.path.join(settings.root, "Projects", "test", "Resources")
    os.makedirs(resources, exist_ok=True)
    path = layout.join(settings.root, "Projects", "test", "Datasets", "iris", "transform.json")
    with open(os.path.join(resources, f"{name}.py"), "w") as out:
        out.write(textwrap.dedent(TRANSFORMER.format(path=path, skip=set(skip))))
    return f"Resources/{name}.py"


def _serve(settings, name: str, rows, transformer: str | None = None) -> None:
    """Serve the iris model as `name` (with `transformer`) and send `rows` as v1 instances, 25 a request."""
    lifecycle.create_or_update(name, "Models/iris", "PYTHON", transformer=transformer,
                               inference_log=InferenceLog(roll_seconds=3600), settings=settings)
    with running(settings, name) as serving:
        for start in range(0, len(rows), 25):
            chunk = rows[start:start + 25]
            status, body = http("POST", base_url(serving) + ":predict",
                                {"instances": chunk.tolist() if isinstance(chunk, np.ndarray) else chunk})
            assert status == 200, body


# --- the model's inputs alone (no transformer) -------------------------------------------------------
def test_the_training_rows_served_show_no_drift_and_matching_preprocessing(trained):
    root, features, _ = trained
    settings = settings_for(root)
    _serve(settings, "same", features)
    report = monitor("same", settings=settings)
    assert report["dataset"]["name"] == "iris"   # from the model's lineage
    assert report["rows"] == len(features) and report["drifted"] == [] and report["unseen"] == {}
    checked = report["preprocessing"]
    assert checked["ok"] and checked["problems"] == [] and checked["method"] == ["ranges"]
    assert checked["rows_checked"] == len(features) and checked["rows_differing"] == 0
    assert [f["name"] for f in report["features"]] == SOURCES
    for feature in report["features"]:
        assert feature["psi"] < 0.01 and feature["js"] < 0.01, feature
    size = report["features"][4]
    assert size["kind"] == "category" and size["ks"] is None and size["p_value"] > 0.99
    # the train split's exact count of each category, and the served ones: the same rows
    exact = Counter(int(v) for v in features[:, 4])
    assert size["histogram"]["train"] == [exact[i] for i in range(3)] + [0]
    assert size["histogram"]["serving"] == size["histogram"]["train"]
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


def test_a_shifted_category_mix_is_flagged_on_its_exact_categories(trained, tmp_path):
    """Two of three rows now 'large' (the model's index of it): petal_size drifts by PSI over its categories,
    the chi-square test rejects the train shares; the numbers (the same rows) do not drift."""
    root, features, _ = trained
    settings = settings_for(root)
    transform = Storage(settings.root).read_json(layout.join(layout.dataset_dir("test", "iris"), "transform.json"))
    large = transform["categorical"]["petal_size"]["categories"].index("large")
    shifted = features.copy()
    shifted[::3, 4] = large
    shifted[1::3, 4] = large
    _serve(settings, "catshift", shifted)
    report = monitor("catshift", settings=settings)
    assert report["drifted"] == ["petal_size"]
    size = report["features"][4]
    assert size["psi"] > 0.2 and size["p_value"] < 1e-3 and size["chi_square"] > 20
    served = Counter(int(v) for v in shifted[:, 4])
    assert size["histogram"]["serving"] == [served[i] for i in range(3)] + [0]
    assert size["histogram"]["categories"] == [*transform["categorical"]["petal_size"]["categories"], "unknown"]
    assert report["preprocessing"]["ok"] and report["unseen"] == {}


def test_raw_inputs_where_training_standardized_are_a_preprocessing_mismatch(trained):
    """No transformer, clients sending the CSV's numbers: each standardized feature whose raw range and
    standardized reading tell them apart is named, and every row is counted as untransformed."""
    root, _, raw = trained
    settings = settings_for(root)
    rows = [[*r[:4], 0] for r in raw]   # the category as an index: only the numbers skip the transform
    _serve(settings, "raw", rows)
    report = monitor("raw", settings=settings)
    checked = report["preprocessing"]
    assert not checked["ok"] and checked["rows_differing"] == len(rows) and checked["share_differing"] == 1.0
    assert checked["problems"][0].startswith(f"untransformed rows: {len(rows)} of {len(rows)} served rows")
    assert {"sepal_length", "petal_length", "petal_width"} <= set(checked["features"]) <= set(NUMERIC)
    assert "feature 'sepal_length':" in " ".join(checked["problems"])
    spec = Storage(settings.root).read_json(layout.join(layout.dataset_dir("test", "iris"),
                                                        "transform.json"))["numeric"]["sepal_length"]
    assert f"serving must apply (x - {spec['mean']:.6g}) / {spec['std']:.6g}" in \
        checked["features"]["sepal_length"]["problem"]
    assert not report["features"][0]["preprocessing"]["ok"]
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
    mixed = [*features.tolist(), *[[*r[:4], 0] for r in raw[:20]]]
    _serve(settings, "mixed", mixed)
    report = monitor("mixed", settings=settings)
    assert not report["preprocessing"]["ok"] and report["preprocessing"]["rows_differing"] == 20
    assert any(f"20 of {len(mixed)} served rows" in p for p in report["preprocessing"]["problems"])


# --- with a transformer: the fitted transform of what was sent against what the model got ----------------
def test_a_transformer_that_applies_the_fitted_transform_passes(trained):
    """Raw rows, half as lists and half as named features, through a transformer that applies transform.json."""
    root, features, raw = trained
    settings = settings_for(root)
    named = [dict(zip(SOURCES, r)) for r in raw[1::2]]
    _serve(settings, "right", [*raw[::2], *named], transformer=_transformer(settings, "right"))
    report = monitor("right", settings=settings)
    checked = report["preprocessing"]
    assert checked == {"ok": True, "problems": [], "method": ["transform"], "rows_checked": len(raw),
                       "rows_differing": 0, "share_differing": 0.0, "features": {}}
    assert report["rows"] == len(raw) and report["drifted"] == [] and report["unseen"] == {}


def test_a_transformer_that_skips_the_transform_is_caught_naming_the_feature(trained):
    root, _, raw = trained
    settings = settings_for(root)
    _serve(settings, "skips", raw, transformer=_transformer(settings, "skips", skip=("sepal_length",)))
    report = monitor("skips", settings=settings)
    checked = report["preprocessing"]
    assert not checked["ok"] and list(checked["features"]) == ["sepal_length"]
    assert checked["rows_differing"] == len(raw) and checked["share_differing"] == 1.0
    first = raw[0][0]
    transform = Storage(settings.root).read_json(layout.join(layout.dataset_dir("test", "iris"), "transform.json"))
    spec = transform["numeric"]["sepal_length"]
    want = f"feature 'sepal_length': served {first:.6g} became {first:.6g} (the transform gives " \
           f"{(first - spec['mean']) / spec['std']:.6g}) in {len(raw)} of {len(raw)} rows: the serving's " \
           "transformer does not apply the fitted transform"
    assert any(p.startswith(want) for p in checked["problems"]), checked["problems"]
    assert checked["problems"][0] == (f"the fitted transform of what clients sent differs from what the model got "
                                      f"in {len(raw)} of {len(raw)} rows (100.0%)")
    flagged = [f["name"] for f in report["features"] if not f["preprocessing"]["ok"]]
    assert flagged == ["sepal_length"]


def test_a_category_training_never_saw_is_named_with_its_count(trained):
    root, _, raw = trained
    settings = settings_for(root)
    rows = [list(r) for r in raw]
    for row in rows[:15]:
        row[4] = "huge"
    for row in rows[15:18]:
        row[4] = "tiny"
    _serve(settings, "unseen", rows, transformer=_transformer(settings, "unseen"))
    report = monitor("unseen", settings=settings)
    assert report["unseen"] == {"petal_size": {"huge": 15, "tiny": 3}}
    size = report["features"][4]
    assert size["histogram"]["categories"][-1] == "unknown" and size["histogram"]["serving"][-1] == 18
    assert report["preprocessing"]["ok"]   # the transformer gives -1, as the fitted transform does
    assert "unseen categories of petal_size: 'huge' (15), 'tiny' (3)" in _cli(settings, "serving", "monitor",
                                                                                "unseen")


# --- KServe v2 ---------------------------------------------------------------------------------------
def test_kserve_v2_requests_json_and_binary_are_monitored_as_v1_rows_are(trained):
    """The model's rows from v2 tensors, JSON and binary (tritonclient's default): no drift, every row seen."""
    httpclient = pytest.importorskip("tritonclient.http")
    root, features, _ = trained
    settings = settings_for(root)
    lifecycle.create_or_update("overv2", "Models/iris", "PYTHON", inference_log=InferenceLog(roll_seconds=3600),
                               settings=settings)
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
    assert report["preprocessing"]["ok"] and report["preprocessing"]["rows_checked"] == len(features)


def _named_tensors(module, rows: list[list], binary: bool) -> list:
    """One v2 input per training column, [rows, 1]: FP64 numbers, BYTES categories."""
    tensors = []
    for j, name in enumerate(SOURCES):
        values = np.asarray([[r[j]] for r in rows], dtype=np.float64 if j < 4 else object)
        tensor = module.InferInput(name, list(values.shape), "FP64" if j < 4 else "BYTES")
        tensor.set_data_from_numpy(values, binary_data=binary)
        tensors.append(tensor)
    return tensors


def test_kserve_v2_named_tensors_through_a_transformer_are_checked_against_the_fitted_transform(trained):
    """Raw columns as named v2 tensors, binary and JSON (tritonclient both ways), through a transformer that
    skips sepal_width: the log holds what was sent (the binary bytes as values), so every row is compared and
    the feature named; an unseen category sent as BYTES is named too."""
    httpclient = pytest.importorskip("tritonclient.http")
    root, _, raw = trained
    settings = settings_for(root)
    rows = [list(r) for r in raw]
    rows[0][4] = "huge"
    lifecycle.create_or_update("v2skips", "Models/iris", "PYTHON", inference_log=InferenceLog(roll_seconds=3600),
                               transformer=_transformer(settings, "v2skips", skip=("sepal_width",)),
                               settings=settings)
    with running(settings, "v2skips") as serving:
        client = httpclient.InferenceServerClient(f"{serving.internal_ips[0]}:{serving.internal_port}")
        for start in range(0, len(rows), 20):
            chunk = rows[start:start + 20]
            answer = client.infer("v2skips", _named_tensors(httpclient, chunk, binary=start % 40 == 0))
            assert answer.as_numpy("output-0").shape == (len(chunk),)
        client.close()
    logged = inference_log.read(lifecycle.get_inference_log("v2skips", settings), ["request"]).to_pylist()
    first = json.loads(logged[0]["request"])["inputs"]
    assert first[4]["data"][:1] == ["huge"] and "parameters" not in first[4]   # the binary bytes, as values
    report = monitor("v2skips", settings=settings)
    checked = report["preprocessing"]
    assert report["rows"] == len(rows) and checked["method"] == ["transform"]
    assert checked["rows_checked"] == len(rows) and checked["rows_differing"] == len(rows)
    assert list(checked["features"]) == ["sepal_width"]
    assert report["unseen"] == {"petal_size": {"huge": 1}}


# --- the pieces ------------------------------------------------------------------------------------------
def test_psi_ks_and_js_of_histograms():
    assert psi([10, 20, 30], [10, 20, 30]) == 0.0
    assert ks([10, 20, 30], [10, 20, 30]) == 0.0
    assert js([1, 0], [0, 1]) == pytest.approx(1.0)
    assert psi([50, 50, 0], [50, 49, 1]) > psi([50, 50, 0], [50, 50, 0])


def test_category_counts_come_from_the_split_when_the_statistics_hold_only_the_top_values():
    """Twelve categories, the statistics' top ten: the counts are asked of the split's rows, not spread."""
    categories = [f"c{i}" for i in range(12)]
    entry = {"count": 78, "distinct": 12, "top": [[f"c{i}", 12 - i] for i in range(10)]}
    stats = {"columns": [{"name": "kind", "splits": {"train": entry}}]}
    transform = {"features": ["kind"], "numeric": {}, "categorical": {"kind": {"categories": categories}}}
    asked = []

    def counter(column: str, size: int) -> list[int]:
        asked.append((column, size))
        return list(range(size, 0, -1))

    (ref,) = _references(stats, transform, "train", counter)
    assert asked == [("kind", 12)] and ref["counts"] == list(range(12, 0, -1))
    entry["distinct"] = 10   # the top values are all of them: no pass over the rows
    (ref,) = _references(stats, transform, "train", counter)
    assert len(asked) == 1 and ref["counts"] == [12 - i for i in range(10)] + [0, 0]


def test_the_fitted_transform_check_covers_one_hot_columns_and_filled_missing_values():
    """A one-hot category and a whole-number column filled with its (rounded) mean under missing='fill': the
    rebuilt transform gives what the table prep wrote, so right inputs pass and wrong ones are named."""
    from hopsml.serving.analysis.preprocessing_check import check, fitted_transform

    transform = {"label": {"column": "y"}, "features": ["a", "c_0", "c_1"],
                 "columns": [{"name": "a", "type": "long"}, {"name": "c", "type": "string"},
                             {"name": "y", "type": "long"}],
                 "numeric": {"a": {"mean": 10.0, "std": 2.0, "standardized": True}},
                 "categorical": {"c": {"categories": ["p", "q"], "one_hot": True}},
                 "missing": {"policy": "fill", "fill": {"a": 10.4, "c": "p"}}}
    stats = {"columns": [{"name": "a", "splits": {"train": {"min": 4, "max": 16}}},
                         {"name": "c", "splits": {"train": {"distinct": 2, "top": [["p", 6], ["q", 4]]}}}]}
    references = _references(stats, transform, "train")
    assert [r["counts"] for r in references[1:]] == [[4, 6], [6, 4]]
    fitted = fitted_transform(transform)
    sent = [[12, "q"], [None, None], [8, "new"]]
    right = [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]]   # missing: 10 (the mean, whole) and 'p'
    assert check(references, fitted, transform, right, sent, 3)["problems"] == []
    wrong = [[12.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 1.0, 0.0]]
    found = check(references, fitted, transform, wrong, sent, 3)
    assert found["rows_differing"] == 2 and list(found["features"]) == ["a", "c_0"]
    assert found["features"]["c_0"]["problem"].startswith(
        "feature 'c_0': served 'new' became 1 (the transform gives 0)")


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
    inputs = ["sepal_length", "sepal_width", "petal_length", "petal_width", "target"]   # not the key or the time
    view = fs.create_feature_view("species", query=flowers.select(inputs), labels=["target"],
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
