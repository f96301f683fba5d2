"""hops.serving's public functions exist in hopsml.serving with hops' parameter names in hops' order (read
from hops 3.8.0.0's source distribution, as tests/unit/test_hops_api.py reads the other modules), and the
definition checks what hops checks. No server is started here."""

from __future__ import annotations

import ast
import inspect
import os
import tarfile
from pathlib import Path

import pytest
from conftest import export_sklearn

from hopsml import serving
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
                       (dict(batching_enabled=True, max_batch_size=0), "max_batch_size must be"),
                       (dict(batch_timeout_micros=-1), "batch_timeout_micros must be"),
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


def test_importing_the_serving_package_loads_no_model_framework():
    import subprocess
    import sys

    code = "import sys, hopsml.serving; print(sorted({'torch', 'sklearn', 'httptools', 'uvloop'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
