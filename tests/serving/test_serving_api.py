"""hops.serving's public functions exist in hopsml.serving with hops' parameter names in hops' order (read
from hops 3.8.0.0's source distribution, as tests/unit/test_hops_api.py reads the other modules), and the
definition checks what hops checks. No server is started here."""

from __future__ import annotations

import ast
import inspect
import json
import os
import tarfile
from pathlib import Path

import pytest
from conftest import export_sklearn

from hopsml import serving
from hopsml.fs import Storage
from hopsml.serving import definition as defs
from hopsml.serving.control import lifecycle


def hops_serving_functions() -> dict[str, list[str]]:
    given = os.environ.get("HOPSML_HOPS_SDIST")
    if not given:
        if os.environ.get("CI"):
            pytest.fail("CI must set HOPSML_HOPS_SDIST to hops 3.8.0.0's sdist (.ci/run downloads it)")
        pytest.skip("HOPSML_HOPS_SDIST is not set: pip download --no-deps --no-binary :all: hops==3.8.0.0")
    with tarfile.open(Path(given)) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("/hops/serving.py"))
        tree = ast.parse(archive.extractfile(member).read())
    return {node.name: [a.arg for a in node.args.args] for node in tree.body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def test_every_hops_serving_function_exists_with_hops_parameters():
    found = hops_serving_functions()
    assert len(found) == 23  # what the issue counted
    problems = []
    for name, hops_params in found.items():
        ours = getattr(serving, name, None)
        if ours is None:
            problems.append(f"serving.{name} is missing")
            continue
        params = inspect.signature(ours).parameters.values()
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if positional[:len(hops_params)] != hops_params:
            problems.append(f"serving.{name}{tuple(positional)} takes hops' {tuple(hops_params)} differently")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path, name, version", [
    ("Models/iris", "iris", None),
    ("/Models/iris/", "iris", None),
    ("Models/iris/2", "iris", 2),
    ("/Projects/test/Models/iris", "iris", None),
    ("hdfs://namenode:8020/Projects/test/Models/iris/3", "iris", 3),
    ("hdfs:///Projects/test/Models/iris", "iris", None),
])
def test_model_path_as_hops_takes_it(path, name, version):
    assert defs.parse_model_path(path, "test", None) == (name, version)


@pytest.mark.parametrize("path, words", [
    ("Resources/iris", "not a registry model"),
    ("Models", "not a registry model"),
    ("/Projects/other/Models/iris", "in project 'other'"),
    ("", "must be a path"),
])
def test_model_paths_that_are_not_registry_models_are_refused(path, words):
    with pytest.raises(defs.ServingError, match=words):
        defs.parse_model_path(path, "test", 1)


def test_the_definition_checks_what_hops_checks_and_keeps_what_it_cannot_honour(settings, tmp_path, root):
    export_sklearn(settings, tmp_path / "model")
    for bad, words in ((dict(serving_name="iris-1"), "letters and digits"),
                       (dict(model_server="TRITON"), "not supported"),
                       (dict(instances=0), "instances must be"),
                       (dict(inference_logging="SOME"), "not a mode"),
                       (dict(model_server="TENSORFLOW_SERVING", predictor="p.py"), "model_server='PYTHON'"),
                       (dict(kserve=True, batching_enabled=True), "KServe"),
                       (dict(canary=serving.Canary(version=1)), "is the stable version itself"),
                       (dict(canary=serving.Canary(traffic_percent=20)), "needs its version"),
                       (dict(models=serving.Models(max_memory_mb=64)), r"give Models\(names="),
                       (dict(predictor_resource_config={"memory": 1}), "'memory' and 'cores'")):
        args = {"serving_name": "iris", "model_path": "Models/iris", "model_server": "PYTHON", **bad}
        with pytest.raises(defs.ServingError, match=words):
            serving.create_or_update(**args)
    assert not serving.exists("iris") and serving.get("iris") is None and serving.get_id("iris") is None
    made = serving.create_or_update("iris", "/Models/iris", "PYTHON", topic_name="NONE", num_partitions=3,
                                    instances=2, predictor_resource_config={"memory": 2048, "cores": 1})
    assert made.id == 1 and serving.get_id("iris") == 1 and serving.exists("iris")
    assert serving.get_status("iris") == "Stopped"
    assert serving.get_model_path("iris") == "Projects/test/Models/iris"
    assert (serving.get_model_name("iris"), serving.get_model_version("iris")) == ("iris", 1)
    assert serving.get_model_server("iris") == "PYTHON" and serving.get_serving_tool("iris") == "DEFAULT"
    assert serving.get_kafka_topic("iris") is None
    assert serving.get_predictor_resource_config("iris") == {"memory": 2048, "cores": 1}
    assert serving.get_available_instances("iris") == 0 and serving.get_internal_endpoints("iris") is None
    assert serving.get_predictor("iris") is None and serving.get_transformer("iris") is None
    assert serving.get_artifact_version("iris") is None
    second = serving.create_or_update("setosa", "Models/iris", "PYTHON")
    assert second.id == 2 and [s.name for s in serving.get_all()] == ["iris", "setosa"]
    again = serving.create_or_update("iris", "Models/iris", "PYTHON", instances=3)
    assert again.id == 1 and again.requested_instances == 3 and again.created == made.created
    with pytest.raises(serving.ServingNotFound, match="servings: iris, setosa"):
        serving.get_model_name("nothing")
    with pytest.raises(lifecycle.ServingError, match="is Stopped, not Running"):
        serving.make_inference_request("iris", [[1, 2, 3, 4]])
    serving.delete("setosa")
    assert [s.name for s in serving.get_all()] == ["iris"]


@pytest.mark.parametrize("make, words", [
    (lambda: serving.Batching(max_batch_size=0), "Batching.max_batch_size must be a whole number of at least 1"),
    (lambda: serving.Batching(batch_timeout_micros=-1), "Batching.batch_timeout_micros must be"),
    (lambda: serving.Batching(max_enqueued_batches=True), "Batching.max_enqueued_batches must be"),
    (lambda: serving.Canary(version=0), "Canary.version must be a model version"),
    (lambda: serving.Canary(version=2, traffic_percent=101), "Canary.traffic_percent must be a whole number from 0"),
    (lambda: serving.Scaling(min_instances=-1), "Scaling.min_instances must be"),
    (lambda: serving.Scaling(min_instances=3, max_instances=2), r"Scaling.min_instances \(3\) is more than"),
    (lambda: serving.Scaling(target=0), "Scaling.target must be a number above 0"),
    (lambda: serving.Scaling(window_s="30"), "Scaling.window_s must be a number above 0"),
    (lambda: serving.Models(names="digits"), "Models.names must be a list of registered model names"),
    (lambda: serving.Models(names=["digits", "digits"]), "lists a model twice"),
    (lambda: serving.Models(names=["../x"]), "invalid model name"),
    (lambda: serving.Models(max_loaded=0), "Models.max_loaded must be"),
    (lambda: serving.Models(max_memory_mb=-5), "Models.max_memory_mb must be a number of MiB above 0"),
    (lambda: serving.InferenceLog(roll_seconds=0), "InferenceLog.roll_seconds must be"),
    (lambda: serving.InferenceLog(queue=1.5), "InferenceLog.queue must be"),
])
def test_an_option_group_refuses_a_bad_value_naming_its_field(make, words):
    with pytest.raises(defs.ServingError, match=words):
        make()


def test_a_flat_extension_keyword_names_the_group_that_now_takes_it(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    for flat, words in ((dict(max_batch_size=32), r"max_batch_size= is now batching=Batching\(max_batch_size=...\)"),
                        (dict(canary_traffic_percent=20), r"canary=Canary\(traffic_percent=...\)"),
                        (dict(scale_window_s=4), r"scaling=Scaling\(window_s=...\)"),
                        (dict(max_loaded_models=2), r"models=Models\(max_loaded=...\)"),
                        (dict(inference_log_roll_seconds=1), r"inference_log=InferenceLog\(roll_seconds=...\)"),
                        (dict(models=["digits"]), r"models= takes hopsml.serving.Models\(names=\[...\]\)"),
                        (dict(batching={"max_batch_size": 8}), r"batching= takes hopsml.serving.Batching")):
        with pytest.raises(defs.MovedOptionError, match=words) as raised:
            lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings, **flat)
        assert isinstance(raised.value, TypeError)
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_batch'"):
        lifecycle.create_or_update("iris", "Models/iris", "PYTHON", settings=settings, max_batch=3)
    assert not serving.exists("iris")


def test_a_group_field_left_none_keeps_the_servings_value_and_the_record_stays_flat(settings, tmp_path, root):
    export_sklearn(settings, tmp_path / "model")
    export_sklearn(settings, tmp_path / "model2")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", batching_enabled=True,
                               batching=serving.Batching(max_batch_size=8, batch_timeout_micros=500),
                               canary=serving.Canary(version=2), scaling=serving.Scaling(max_instances=3),
                               inference_log=serving.InferenceLog(roll_seconds=60), settings=settings)
    again = lifecycle.create_or_update("iris", "Models/iris", "PYTHON", batching_enabled=True,
                                       batching=serving.Batching(max_batch_size=16),
                                       canary=serving.Canary(traffic_percent=40), scaling=serving.Scaling(target=2.5),
                                       settings=settings)
    assert (again.canary_version, again.canary_traffic_percent) == (2, 40)   # 10 at first: a new canary's default
    assert (again.min_instances, again.max_instances, again.scale_target) == (1, 3, 2.5)
    record_path = Path(root) / "Projects/test/Serving/iris/serving.json"
    record = json.loads(record_path.read_text())
    assert {key: record[key] for key in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                                         "inference_log_roll_seconds", "canary_version", "max_instances")} == {
        "max_batch_size": 16, "batch_timeout_micros": 500, "max_enqueued_batches": 100,
        "inference_log_roll_seconds": 60, "canary_version": 2, "max_instances": 3}
    assert not {"batching", "canary", "scaling", "inference_log"} & set(record)
    d = defs.read(Storage(settings.root), "test", "iris")
    assert d.batching_options == serving.Batching(max_batch_size=16, batch_timeout_micros=500, max_enqueued_batches=100)
    assert d.canary_options == serving.Canary(version=2, traffic_percent=40)
    assert d.scaling_options == serving.Scaling(min_instances=None, max_instances=3, target=2.5, window_s=30.0)
    assert d.inference_log_options.roll_seconds == 60 and d.models_options is None


def test_a_pipeline_step_takes_an_option_group_as_plain_data(settings, tmp_path):
    """An Airflow DAG holds plain data: CreateServingOperator's options give a group as a dict of its fields."""
    from hopsml.airflow import steps

    export_sklearn(settings, tmp_path / "model")
    steps.create_serving(settings, "iris", "iris", 1, batching_enabled=True, batching={"max_batch_size": 4},
                         inference_log={"roll_seconds": 60})
    d = defs.read(Storage(settings.root), "test", "iris")
    assert (d.batching_options.max_batch_size, d.inference_log_options.roll_seconds) == (4, 60)
    with pytest.raises(defs.ServingError, match="Batching.max_batch_size must be"):
        steps.create_serving(settings, "iris", "iris", 1, batching={"max_batch_size": 0})
    with pytest.raises(defs.MovedOptionError, match="inference_log=InferenceLog"):
        steps.create_serving(settings, "iris", "iris", 1, inference_log_roll_seconds=60)


def test_an_older_flat_record_reads_into_the_groups(settings, tmp_path, root):
    """A serving.json written before scaling, several models and the log's knobs existed still reads, with their
    defaults."""
    export_sklearn(settings, tmp_path / "model")
    folder = Path(root) / "Projects/test/Serving/old"
    folder.mkdir(parents=True)
    (folder / "serving.json").write_text(json.dumps({
        "name": "old", "model_path": "Projects/test/Models/iris", "model_name": "iris", "model_version": 1,
        "model_server": "PYTHON", "id": 7, "batching_enabled": True, "max_batch_size": 4, "instances": 2}))
    d = defs.read(Storage(settings.root), "test", "old")
    assert d.batching_options == serving.Batching(max_batch_size=4, batch_timeout_micros=1000, max_enqueued_batches=100)
    assert d.scaling_options == serving.Scaling(target=10.0, window_s=30.0) and d.scaling_bounds == (2, 2)
    assert d.canary_options is None and d.models_options is None
    assert serving.get("old").requested_instances == 2


def test_importing_the_serving_package_loads_no_model_framework():
    import subprocess
    import sys

    code = "import sys, hopsml.serving; print(sorted({'torch', 'sklearn', 'httptools', 'uvloop'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
