"""The hopsworks SDK's surface, measured: every member in hopsworks_surface.json (what the hopsworks-tutorials and
the SDK's documented examples call on `hopsworks`, Project, the dataset and job APIs, FeatureStore, FeatureGroup,
Query, FeatureView, the transformation functions, ModelRegistry/Model and ModelServing/Deployment/Predictor) is
checked against the SDK's own source, read with `ast` from the wheel named by HOPSML_HOPSWORKS_WHEEL:

- hopsml's object has the member, with a compatible signature (every SDK parameter and every keyword the callers
  pass is accepted, the first positional parameters are in the SDK's order, nothing the SDK leaves optional is
  required), and
- it works on a tiny project (insert, read, views, splits, vectors, register, deploy, predict: each exercised
  below), or raises one NotOfferedError that names it.

    pip download --no-deps "hopsworks==4.2.*" -d /tmp/hw
    HOPSML_HOPSWORKS_WHEEL=$(ls /tmp/hw/hopsworks-*.whl) python -m pytest -s tests/unit/test_hopsworks_surface.py

prints the coverage N/M and each member that falls short. The list is rebuilt by hopsworks_surface_list.py.
"""

from __future__ import annotations

import ast
import datetime as dt
import importlib
import inspect
import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

WHEEL = os.environ.get("HOPSML_HOPSWORKS_WHEEL")
SURFACE = json.loads(Path(__file__).with_name("hopsworks_surface.json").read_text())
TARGET = 0.95   # of the whole list; every member the tutorials use must be covered

pytestmark = pytest.mark.skipif(
    not WHEEL, reason="the SDK's surface is measured against its source: set HOPSML_HOPSWORKS_WHEEL to the wheel "
                      "`pip download --no-deps \"hopsworks==4.2.*\" -d DIR` gives")

# hopsml's modules standing for the SDK's modules in the list
MODULES = {"hopsworks": "hopsml.hopsworks",
           "hsfs.builtin_transformations": "hopsml.hopsworks.hsfs.builtin_transformations",
           "hsfs.feature": "hopsml.hopsworks.hsfs.feature", "hsml.schema": "hopsml.hopsworks.hsml.schema",
           "hsml.model_schema": "hopsml.hopsworks.hsml.model_schema",
           "hsml.transformer": "hopsml.hopsworks.hsml.transformer"}

PREDICTOR = textwrap.dedent("""
    import os

    import joblib


    class Predict:
        def __init__(self):
            self.model = joblib.load(os.path.join(os.environ["MODEL_FILES_PATH"], "model.joblib"))

        def predict(self, inputs):
            return self.model.predict([[float(v) for v in row] for row in inputs]).tolist()
""")
TRANSFORMER = textwrap.dedent("""
    class Transformer:
        def preprocess(self, inputs):
            return inputs

        def postprocess(self, outputs):
            return outputs
""")


# --- the SDK's signatures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sdk() -> dict[str, dict[str, Any]]:
    from hopsworks_surface_list import sdk_index, unpacked

    return sdk_index(unpacked(Path(WHEEL or "")))


def problems_with(kind: str, sdk_def: Any, ours: Any, use: dict[str, Any]) -> list[str]:
    """What keeps hopsml's member `ours` from standing in for the SDK's `sdk_def` for its callers."""
    if kind not in ("method", "function", "class") or sdk_def is None:
        return []
    if any("udf" in ast.unparse(d) for d in sdk_def.decorator_list):
        return []   # a @udf function is called through HopsworksUdf.__call__(*features), not its own def
    if not callable(ours):
        return [f"the SDK's {kind} is not callable here ({type(ours).__name__})"]
    try:
        signature = inspect.signature(ours)
    except (TypeError, ValueError):
        return []
    params = list(signature.parameters.values())
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    by_keyword = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    args = sdk_def.args
    sdk_positional = [a.arg for a in args.posonlyargs + args.args]
    if sdk_positional[:1] in (["self"], ["cls"]):
        sdk_positional = sdk_positional[1:]
    required_count = len(sdk_positional) - len(args.defaults)
    names = set(sdk_positional) | {a.arg for a in args.kwonlyargs}
    out = []
    missing = sorted(n for n in names | set(use["keywords"]) if n not in by_keyword and not var_kw)
    if missing:
        out.append(f"does not take {', '.join(missing)}")
    n = max(use["positional"], required_count)
    if sdk_def.args.vararg is None and positional[:n] != sdk_positional[:n] and not (var_pos and not positional):
        out.append(f"positional order {positional[:n]} where the SDK has {sdk_positional[:n]}")
    required = {p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL,
                                                                                  p.VAR_KEYWORD)}
    if required - names:
        out.append(f"requires {', '.join(sorted(required - names))}, which the SDK does not have")
    return out


# --- a tiny project ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A project with two groups (one online), a view with a label and a transform, a model and a job."""
    import joblib
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LinearRegression

    from hopsml import hopsworks
    from hopsml.hopsworks.hsfs.builtin_transformations import min_max_scaler

    tmp = tmp_path_factory.mktemp("surface")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOPSML_ROOT", str(tmp / "root"))
        patch.setenv("HOPSML_PROJECT", "surface")
        patch.delenv("HOPSML_CONF", raising=False)
        patch.chdir(tmp)
        w = SimpleNamespace(tmp=tmp, hopsworks=hopsworks)
        w.project = hopsworks.login(project="surface")
        w.fs = w.project.get_feature_store()
        t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
        w.t0 = t0
        w.frame = pd.DataFrame({"cc_num": [1, 2, 3, 4, 5, 6], "ts": [t0 + dt.timedelta(hours=i) for i in range(6)],
                                "amount": [10.0, 20.0, 35.0, 5.0, 50.0, 12.0], "category": list("abab" "ab"),
                                "fraud": [0, 1, 0, 0, 1, 0]})
        w.fg = w.fs.create_feature_group("transactions", version=1, primary_key=["cc_num"], event_time="ts",
                                         online_enabled=True)
        w.fg.insert(w.frame)
        w.profiles = w.fs.create_feature_group("profiles", version=1, primary_key=["cc_num"], online_enabled=True)
        w.profiles.insert(pd.DataFrame({"cc_num": [1, 2, 3, 4, 5, 6], "age": [30, 40, 50, 60, 70, 80]}))
        w.query = w.fg.select(["cc_num", "ts", "amount", "fraud"]).join(w.profiles.select(["age"]))
        w.fv = w.fs.create_feature_view("fraud", query=w.query, version=1, labels=["fraud"],
                                        transformation_functions=[min_max_scaler("amount")])
        w.td_version, _ = w.fv.create_training_data(description="all")
        x, y = w.fv.get_training_data(w.td_version)
        model_dir = tmp / "model"
        model_dir.mkdir()
        w.columns = [c for c in x.columns if c not in ("cc_num", "ts")]
        w.fitted = LinearRegression().fit(x[w.columns].to_numpy(dtype=float), np.ravel(y))
        joblib.dump(w.fitted, model_dir / "model.joblib")
        w.mr = w.project.get_model_registry()
        w.model = w.mr.sklearn.create_model("fraud", metrics={"mse": 0.1}, feature_view=w.fv,
                                            training_dataset_version=w.td_version, input_example=x.head(1))
        w.model.save(str(model_dir))
        w.ms = w.project.get_model_serving()
        (tmp / "predict.py").write_text(PREDICTOR)
        (tmp / "transform.py").write_text(TRANSFORMER)
        w.predictor = w.ms.create_predictor(w.model, name="fraud", script_file=str(tmp / "predict.py"))
        w.deployment = w.predictor.deploy()
        app = tmp / "app.py"
        app.write_text("print('hello from the job')\n")
        w.job_api = w.project.get_job_api()
        config = w.job_api.get_configuration("PYTHON")
        config["appPath"] = str(app)
        w.job = w.job_api.create_job("hello", config)
        w.execution = None
        w.dataset_api = w.project.get_dataset_api()

        @w.hopsworks.udf(float)
        def doubled(amount):
            return amount * 2

        w.udf = doubled
        w.tf = w.fs.create_transformation_function(doubled, version=1)
        yield w
        for deployment in w.ms.get_deployments():
            deployment.delete(force=True)


def objects(w: Any) -> dict[str, Any]:
    """hopsml's object for each class of the list."""
    out = {"hopsworks": w.hopsworks, "Project": w.project, "DatasetApi": w.dataset_api, "JobApi": w.job_api,
           "Job": w.job, "Execution": w.execution or w.job.run(await_termination=True), "FeatureStore": w.fs,
           "FeatureGroup": w.fg, "Query": w.query, "FeatureView": w.fv, "TransformationFunction": w.tf,
           "HopsworksUdf": w.udf, "ModelRegistry": w.mr, "mr.python": w.mr.python, "mr.sklearn": w.mr.sklearn,
           "mr.tensorflow": w.mr.tensorflow, "mr.torch": w.mr.torch, "Model": w.model, "ModelServing": w.ms,
           "Predictor": w.predictor, "Deployment": w.deployment}
    w.execution = out["Execution"]
    for name, module in MODULES.items():
        out[name] = importlib.import_module(module)
    return out


# --- what each member is asked to do ------------------------------------------------------------------------------
EXERCISES: list[tuple[tuple[str, ...], Callable[[Any], None]]] = []


def exercise(*members: str) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    def register(fn: Callable[[Any], None]) -> Callable[[Any], None]:
        EXERCISES.append((members, fn))
        return fn
    return register


@exercise("hopsworks.login", "hopsworks.get_current_project", "hopsworks.connection", "hopsworks.create_project",
          "Project.name", "Project.id", "Project.get_feature_store", "Project.get_model_registry",
          "Project.get_model_serving", "Project.get_job_api", "Project.get_jobs_api", "Project.get_dataset_api",
          "FeatureStore.id")
def _project(w):
    h = w.hopsworks
    assert h.login(host="c.app.hopsworks.ai", api_key_value="k", project="surface").name == "surface"
    assert h.get_current_project().name == w.project.name == "surface"
    assert h.connection(project="surface").get_feature_store().name == "surface_featurestore"
    assert h.create_project("surface_two", description="d").name == "surface_two"
    with pytest.raises(Exception, match="exists"):
        h.create_project("surface_two")
    assert w.project.id == h.login(project="surface").id and isinstance(w.fs.id, int)
    assert w.project.get_feature_store().name == w.fs.name
    assert w.project.get_jobs_api().exists("hello") and w.project.get_job_api().exists("hello")
    assert w.project.get_model_registry().get_model("fraud").version == 1
    assert w.project.get_model_serving().get_deployment("fraud").name == "fraud"
    assert w.project.get_dataset_api().exists("Models")


@exercise("DatasetApi.upload", "DatasetApi.exists", "DatasetApi.mkdir", "DatasetApi.list_files", "DatasetApi.copy",
          "DatasetApi.move", "DatasetApi.download", "DatasetApi.remove")
def _datasets(w):
    api = w.dataset_api
    folder = w.tmp / "features"
    folder.mkdir(exist_ok=True)
    (folder / "a.py").write_text("A = 1\n")
    assert api.upload(str(folder), "Resources", overwrite=True) == "Resources/features"
    with pytest.raises(Exception, match="already exists"):
        api.upload(str(folder), "Resources")
    assert api.exists("Resources/features/a.py") and not api.exists("Resources/nothing")
    assert api.mkdir("Resources/empty") == "Resources/empty" and api.exists("/Projects/surface/Resources/empty")
    count, files = api.list_files("Resources/features", 0, 10)
    assert count == 1 and files[0].name == "a.py" and files[0].path.endswith("Resources/features/a.py")
    api.copy("Resources/features/a.py", "Resources/b.py")
    api.move("Resources/b.py", "Resources/c.py")
    assert api.exists("Resources/c.py") and not api.exists("Resources/b.py")
    local = api.download("Resources/c.py", str(w.tmp), overwrite=True)
    assert Path(local).read_text() == "A = 1\n"
    api.remove("Resources/c.py")
    assert not api.exists("Resources/c.py")


@exercise("FeatureStore.create_feature_group", "FeatureStore.get_or_create_feature_group",
          "FeatureStore.get_feature_group", "FeatureGroup.insert", "FeatureGroup.save", "FeatureGroup.read",
          "FeatureGroup.show", "FeatureGroup.delete", "FeatureGroup.multi_part_insert",
          "FeatureGroup.finalize_multi_part_insert", "FeatureGroup.feature_store", "FeatureGroup.json",
          "FeatureGroup.get_complex_features", "FeatureGroup.embedding_index")
def _groups(w):
    import pandas as pd

    fg = w.fs.get_or_create_feature_group("scratch", version=1, primary_key=["k"], description="d")
    fg.save(pd.DataFrame({"k": [1, 2], "v": [1.0, 2.0]}))
    fg.insert(pd.DataFrame({"k": [2, 3], "v": [5.0, 3.0]}), write_options={"wait_for_job": True})
    assert sorted(w.fs.get_feature_group("scratch", 1).read()["v"]) == [1.0, 3.0, 5.0]
    assert len(fg.show(2)) == 2 and fg.feature_store is w.fs and json.loads(fg.json())["name"] == "scratch"
    parts = w.fs.create_feature_group("parts", version=1, primary_key=["k"])
    assert parts.multi_part_insert(pd.DataFrame({"k": [1], "v": [[1.0, 2.0]]})) == (None, None)
    parts.multi_part_insert(pd.DataFrame({"k": [2], "v": [[3.0, 4.0]]}))
    parts.finalize_multi_part_insert()
    assert len(parts.read()) == 2 and parts.get_complex_features() == ["v"] and parts.embedding_index is None
    fg.delete()
    with pytest.raises(Exception, match="no feature group"):
        w.fs.get_feature_group("scratch", 1)


@exercise("FeatureGroup.select", "FeatureGroup.select_all", "FeatureGroup.select_except",
          "FeatureGroup.select_features", "FeatureGroup.filter", "FeatureGroup.__getattr__", "FeatureGroup.as_of",
          "FeatureGroup.get_feature", "Query.join", "Query.filter", "Query.read", "Query.show", "Query.to_string",
          "Query.pull_changes")
def _queries(w):
    fg = w.fg
    assert list(fg.select(["amount"]).read().columns) == ["amount"]
    assert set(fg.select_all(include_primary_key=False, include_event_time=False).read().columns) == {
        "amount", "category", "fraud"}
    assert "category" not in fg.select_except(["category"]).read().columns
    assert "amount" in fg.select_features().read().columns
    assert len(fg.filter(fg.amount > 15).read()) == 3 and len(fg.filter(fg.get_feature("fraud") == 1).read()) == 2
    joined = fg.select(["cc_num", "amount"]).join(w.profiles.select(["age"]), on=["cc_num"], prefix="p_")
    assert len(joined.filter(fg.amount < 11).read()) == 2 and len(joined.show(3)) == 3
    assert '"amount"' in joined.to_string()
    assert len(fg.as_of(dt.datetime.now(dt.timezone.utc)).read()) == 6
    assert len(fg.select_all().pull_changes(w.t0, dt.datetime.now(dt.timezone.utc)).read()) == 6


@exercise("FeatureGroup.statistics", "FeatureGroup.statistics_config", "FeatureGroup.compute_statistics",
          "FeatureGroup.update_statistics_config", "FeatureGroup.update_feature_description")
def _statistics(w):
    fg = w.fg
    fg.statistics_config = {"enabled": True, "histograms": False}
    fg.update_statistics_config()
    fg.compute_statistics()
    found = {s.feature_name: s for s in fg.statistics.feature_descriptive_statistics}
    assert found["amount"].max == 50.0 and found["amount"].count == 6
    fg.update_feature_description("amount", "the amount")
    assert w.fs.get_feature_group("transactions", 1).get_feature("amount").description == "the amount"


@exercise("FeatureStore.sql")
def _sql(w):
    assert w.fs.sql("SELECT count(*) AS n FROM transactions_1 WHERE amount > 15")["n"].tolist() == [3]


@exercise("FeatureStore.create_feature_view", "FeatureStore.get_or_create_feature_view",
          "FeatureStore.get_feature_view", "FeatureView.name", "FeatureView.version", "FeatureView.query",
          "FeatureView.schema", "FeatureView.to_dict", "FeatureView.delete", "FeatureView.training_data",
          "FeatureView.train_test_split", "FeatureView.train_validation_test_split",
          "FeatureView.create_training_data", "FeatureView.create_train_test_split",
          "FeatureView.create_train_validation_test_split", "FeatureView.get_train_test_split",
          "FeatureView.get_train_validation_test_split", "FeatureView.get_training_dataset_schema",
          "FeatureView.add_tag", "FeatureView.add_training_dataset_tag")
def _views(w):
    fv = w.fs.get_or_create_feature_view("fraud", version=1, query=w.query, labels=["fraud"])
    assert (fv.name, fv.version) == ("fraud", 1) and fv.query.left.name == "transactions"
    assert [f.name for f in fv.schema] == ["cc_num", "ts", "amount", "fraud", "age"]
    assert [f.name for f in fv.schema if f.label] == ["fraud"] and fv.to_dict()["labels"] == ["fraud"]
    x, y = fv.training_data(description="d")
    assert len(x) == 6 and list(y.columns) == ["fraud"]
    x_train, x_test, _, _ = fv.train_test_split(test_size=0.5, seed=1)
    assert len(x_train) + len(x_test) == 6
    assert len(fv.train_validation_test_split(validation_size=0.25, test_size=0.25, seed=4)) == 6
    version, _ = fv.create_train_test_split(test_size=0.5, seed=2)
    assert len(fv.get_train_test_split(version)) == 4
    version3, _ = fv.create_train_validation_test_split(validation_size=0.25, test_size=0.25, seed=3)
    assert len(fv.get_train_validation_test_split(version3)) == 6
    assert "min_max_scaler_amount_" in [f.name for f in fv.get_training_dataset_schema(w.td_version)]
    fv.add_tag("owner", {"team": "fraud"})
    fv.add_training_dataset_tag(training_dataset_version=w.td_version, name="kind", value="full")
    assert fv.get_tag("owner") == {"team": "fraud"} and fv.get_training_dataset_tag(w.td_version, "kind") == "full"
    other = w.fs.create_feature_view("scratch_view", query=w.fg.select(["amount"]))
    assert w.fs.get_feature_view("scratch_view").version == 1
    other.delete()
    with pytest.raises(Exception, match="no feature view"):
        w.fs.get_feature_view("scratch_view")


@exercise("FeatureView.init_batch_scoring", "FeatureView.get_batch_data", "FeatureView.init_serving",
          "FeatureView.get_feature_vector", "FeatureView.transform")
def _vectors(w):
    fv = w.fv
    fv.init_batch_scoring(w.td_version)
    batch = fv.get_batch_data(start_time=w.t0, end_time=dt.datetime.now(dt.timezone.utc))
    assert len(batch) == 6 and batch["min_max_scaler_amount_"].max() == 1.0
    fv.init_serving(w.td_version)
    vector = fv.get_feature_vector({"cc_num": 5})
    assert 1.0 in vector and 70 in vector
    assert fv.get_feature_vector(entry={"cc_num": 5}, transform=False, return_type="pandas")["amount"].tolist() == [
        50.0]
    assert 1.0 in fv.transform([5, w.t0, 50.0, 70])   # amount, scaled on the training data (50 is its max)


@exercise("FeatureView.log", "FeatureView.materialize_log", "FeatureView.read_log", "FeatureView.pause_logging",
          "FeatureView.resume_logging", "FeatureView.get_log_timeline", "FeatureView.delete_log")
def _logging(w):
    import pandas as pd

    fv = w.fs.create_feature_view("logged", query=w.fg.select(["cc_num", "amount", "fraud"]), labels=["fraud"],
                                  logging_enabled=True)
    fv.pause_logging()
    fv.log(pd.DataFrame({"cc_num": [1], "amount": [10.0]}), pd.DataFrame({"fraud": [1]}))
    fv.materialize_log(wait=True)
    fv.resume_logging()
    assert len(fv.read_log()) == 1 and fv.get_log_timeline()
    fv.delete_log()
    assert len(fv.read_log()) == 0


@exercise("FeatureStore.get_transformation_functions", "FeatureStore.get_transformation_function",
          "FeatureStore.create_transformation_function", "TransformationFunction.save",
          "TransformationFunction.delete", "hopsworks.udf", "hsfs.builtin_transformations.min_max_scaler",
          "hsfs.builtin_transformations.standard_scaler", "hsfs.builtin_transformations.label_encoder")
def _transformations(w):
    import pandas as pd

    from hopsml.hopsworks.hsfs.builtin_transformations import label_encoder, standard_scaler

    names = [f.name for f in w.fs.get_transformation_functions()]
    assert "min_max_scaler" in names and w.fs.get_transformation_function(name="label_encoder").name == "label_encoder"
    w.tf.save()
    found = w.fs.get_transformation_function("doubled", version=1)
    assert found.version == 1 and found("amount").apply(pd.DataFrame({"amount": [2.0]}))["doubled_amount_"].tolist() \
        == [4.0]
    found.delete()
    with pytest.raises(Exception, match="no transformation function 'doubled'"):
        w.fs.get_transformation_function("doubled", 1)
    view = w.fs.create_feature_view("encoded", query=w.fg.select(["category", "amount", "fraud"]), labels=["fraud"],
                                    transformation_functions=[label_encoder("category"), standard_scaler("amount")])
    x, _ = view.training_data()
    assert set(x["label_encoder_category_"]) == {0, 1}


@exercise("ModelRegistry.python", "ModelRegistry.sklearn", "ModelRegistry.tensorflow", "ModelRegistry.llm",
          "mr.python.create_model", "mr.sklearn.create_model", "mr.tensorflow.create_model", "Model.save",
          "Model.version", "Model.input_example", "Model.model_files_path", "Model.download", "Model.get_url",
          "Model.get_feature_view", "Model.delete", "ModelRegistry.get_model", "ModelRegistry.get_best_model",
          "hsml.schema.Schema", "hsml.model_schema.ModelSchema")
def _models(w):
    from hopsml.hopsworks.hsml.model_schema import ModelSchema
    from hopsml.hopsworks.hsml.schema import Schema

    folder = w.tmp / "other_model"
    folder.mkdir(exist_ok=True)
    (folder / "model.json").write_text("{}")
    schema = ModelSchema(input_schema=Schema(w.frame[["amount"]]), output_schema=Schema(w.frame["fraud"]))
    for registry, metric in ((w.mr.python, 0.3), (w.mr.tensorflow, 0.2)):
        registry.create_model(name="other", metrics={"mse": metric}, description="d", model_schema=schema,
                              input_example=w.frame.head(1)).save(str(folder))
    assert w.mr.get_best_model("other", "mse", "min").version == 2 and w.mr.llm is not None
    model = w.mr.get_model(name="fraud", version=1)
    assert model.version == 1 and model.input_example and model.model_files_path.endswith("Models/fraud/1")
    assert w.dataset_api.exists(model.model_files_path + "/model.joblib") and "/models" in model.get_url()
    assert os.path.exists(os.path.join(model.download(), "model.joblib"))
    assert model.get_feature_view(init=True).name == "fraud"
    w.mr.get_model("other", 1).delete()
    with pytest.raises(Exception, match="other"):
        w.mr.get_model("other", 1)
    with pytest.raises(Exception, match="served by fraud"):
        w.mr.get_model("fraud", 1).delete()


@exercise("Model.deploy", "ModelServing.get_deployment", "ModelServing.get_deployment_by_id",
          "ModelServing.create_predictor", "ModelServing.create_deployment", "ModelServing.create_transformer",
          "hsml.transformer.Transformer", "Predictor.deploy", "Predictor.script_file", "Deployment.save",
          "Deployment.name", "Deployment.predictor", "Deployment.model_name", "Deployment.model_version",
          "Deployment.get_url", "Deployment.describe", "Deployment.start", "Deployment.predict",
          "Deployment.get_state", "Deployment.get_logs", "Deployment.stop", "Deployment.delete")
def _deployments(w):
    from hopsml.hopsworks.hsml.transformer import Transformer

    ms, deployment = w.ms, w.deployment
    assert deployment.predictor.script_file.endswith("predict.py") and deployment.name == "fraud"
    assert (deployment.model_name, deployment.model_version) == ("fraud", 1)
    assert ms.get_deployment_by_id(ms.get_deployment("fraud").id).name == "fraud"
    assert deployment.get_url().endswith("/servings/fraud")
    transformer = ms.create_transformer(script_file=str(w.tmp / "transform.py"), resources={"num_instances": 1})
    other = ms.create_deployment(ms.create_predictor(w.model, name="withtransformer",
                                                     script_file=str(w.tmp / "predict.py"),
                                                     transformer=transformer), name="withtransformer").save()
    assert ms.get_deployment("withtransformer").transformer.script_file.endswith("transform.py")
    assert isinstance(Transformer(script_file="t.py"), Transformer)
    other.delete()
    second = w.model.deploy(name="second", script_file=str(w.tmp / "predict.py"), description="d")
    second.describe()
    assert second.get_state().status == "Stopped"
    second.delete()
    deployment.start(await_running=300)
    try:
        assert deployment.get_state().status == "Running"
        rows = [[0.5, 40.0], [1.0, 70.0]]
        answer = deployment.predict(inputs=rows)
        assert answer["predictions"] == pytest.approx(w.fitted.predict(rows).tolist())
        assert isinstance(deployment.get_logs(component="predictor", tail=5), str)
    finally:
        deployment.stop(await_stopped=60)
    assert deployment.get_state().status == "Stopped"


@exercise("JobApi.get_configuration", "JobApi.create_job", "JobApi.exists", "JobApi.get_job", "Job.config",
          "Job.save", "Job.run", "Job.get_executions", "Job.job_schedule", "Execution.success",
          "Execution.download_logs")
def _jobs(w):
    job = w.job_api.get_job("hello")
    assert job.config["appPath"].endswith("app.py") and job.job_schedule is None and w.job_api.exists("hello")
    job.save()
    execution = job.run(args="", await_termination=True)
    assert execution.success and len(job.get_executions()) >= 1
    out, _ = execution.download_logs()
    assert "hello from the job" in Path(out).read_text()


@exercise("hsfs.feature.Feature")
def _feature(w):
    from hopsml.hopsworks.hsfs.feature import Feature

    assert Feature(name="amount", type="double", description="d").name == "amount"


# --- the measurement ----------------------------------------------------------------------------------------------
def measure(w: Any, sdk: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """member -> ('works' | 'refused' | 'fails', why)."""
    from hopsml.errors import NotOfferedError

    listed = {f"{m['class']}.{m['member']}": m for m in SURFACE["members"]}
    result: dict[str, tuple[str, str]] = {}
    have = objects(w)
    for key, member in listed.items():   # signatures first, and refusals of members no exercise covers
        owner, name = member["class"], member["member"]
        kind, sdk_def = sdk[owner].get(name, (member["kind"], None))
        try:
            ours = getattr(have[owner], name) if name != "__getattr__" else have[owner].__getattr__
        except NotOfferedError as refused:
            result[key] = ("refused", "") if key in str(refused) else ("fails", f"refusal not naming it: {refused}")
            continue
        except AttributeError as missing:
            result[key] = ("fails", f"missing ({missing})")
            continue
        problems = problems_with(kind, sdk_def, ours, member)
        if problems:
            result[key] = ("fails", "; ".join(problems))
        elif kind in ("method", "function") and getattr(ours, "__name__", "") == name and \
                "Not offered by hopsml" in (ours.__doc__ or ""):
            try:
                ours()
                result[key] = ("fails", "the refusal did not raise")
            except NotOfferedError as refused:
                result[key] = ("refused", "") if key in str(refused) else ("fails", f"refusal not naming it: "
                                                                                      f"{refused}")
    for members, fn in EXERCISES:
        todo = [m for m in members if m in listed and m not in result]
        if not todo:
            continue
        try:
            fn(w)
            why = ("works", "")
        except Exception as error:  # noqa: BLE001 - any failure of an exercise is what the measurement reports
            why = ("fails", f"{fn.__name__}: {type(error).__name__}: {str(error)[:300]}")
        for member in todo:
            result[member] = why
    for key in listed:
        result.setdefault(key, ("fails", "neither exercised nor refused"))
    return result


def test_the_sdk_surface_is_covered(world, sdk, capsys):
    result = measure(world, sdk)
    members = SURFACE["members"]
    covered = [k for k, (state, _) in result.items() if state != "fails"]
    refused = sorted(k for k, (state, _) in result.items() if state == "refused")
    tutorial_gaps = sorted(f"{m['class']}.{m['member']}" for m in members
                           if m["files"] and result[f"{m['class']}.{m['member']}"][0] == "fails")
    with capsys.disabled():
        print(f"\nhopsworks SDK surface ({SURFACE['sdk']}; {SURFACE['tutorials']}): {len(covered)}/{len(members)} "
              f"covered ({len(covered) - len(refused)} work, {len(refused)} refused by name)")
        for key, (state, why) in sorted(result.items()):
            if state == "fails":
                print(f"  MISSING {key}: {why}")
        print("  refused: " + ", ".join(refused))
    assert not tutorial_gaps, f"members the tutorials use that fall short: {tutorial_gaps}"
    assert len(covered) >= TARGET * len(members), f"{len(covered)}/{len(members)} is under {TARGET:.0%}"


def test_the_list_names_only_members_the_sdk_has(sdk):
    """The committed list and the wheel agree: a member that the SDK drops shows here, not as a hopsml gap."""
    gone = [f"{m['class']}.{m['member']}" for m in SURFACE["members"] if m["member"] not in sdk[m["class"]]]
    assert not gone, f"not in {WHEEL}: {gone}; rebuild the list with hopsworks_surface_list.py"
