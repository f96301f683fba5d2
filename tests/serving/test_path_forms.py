"""Every path form `hdfs` accepts works where serving takes a path, through hdfs's one resolver: the hops idiom
`predictor=hdfs.project_path() + "Resources/predictor.py"` (refused before: 'does not exist at
/…/Projects/p/…/Projects/p/Resources/predictor.py'), abs_path(), project-relative, root-relative,
/Projects/<p>/..., hdfs:/// and file:// forms, for the predictor script and the model path; one of them served."""

from __future__ import annotations

import textwrap

import pytest
from conftest import base_url, export_sklearn, http, running

from hopsml import hdfs, layout
from hopsml.serving import definition as defs
from hopsml.serving.control import lifecycle
from hopsml.serving.server.supervisor import script_rel

PREDICTOR = '''
    class Predict:
        def predict(self, inputs):
            return [sum(row) for row in inputs]
'''


def _forms(settings, rel: str) -> dict[str, str]:
    """Each way a hops notebook or hopsml's docs write the project path `rel`."""
    return {"project-relative": rel, "root-relative": f"Projects/{settings.project}/{rel}",
            "hopsworks namespace": f"/Projects/{settings.project}/{rel}",
            "hdfs.project_path()": hdfs.project_path() + rel, "hdfs.abs_path()": hdfs.abs_path(rel),
            "hdfs:///": f"hdfs:///Projects/{settings.project}/{rel}",
            "file://": "file://" + hdfs.abs_path(rel)}


@pytest.fixture
def model(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    resources = hdfs.abs_path("Resources")
    hdfs.mkdir("Resources")
    with open(resources + "/predictor.py", "w") as out:
        out.write(textwrap.dedent(PREDICTOR))


@pytest.mark.parametrize("form", ["project-relative", "root-relative", "hopsworks namespace", "hdfs.project_path()",
                                  "hdfs.abs_path()", "hdfs:///", "file://"])
def test_each_form_of_the_predictor_and_model_path_names_the_same_files(settings, model, form):
    script = _forms(settings, "Resources/predictor.py")[form]
    model_path = _forms(settings, "Models/iris")[form]
    serving = lifecycle.create_or_update("forms", model_path, "PYTHON", predictor=script, settings=settings)
    assert serving.model_name == "iris" and serving.model_version == 1
    definition = defs.read(hdfs._storage_for(settings.root), settings.project, "forms")
    assert script_rel(hdfs._storage_for(settings.root), settings.project, definition, definition.predictor) == \
        layout.join(layout.project_dir(settings.project), "Resources/predictor.py")


def test_the_hops_idiom_serves(settings, model):
    script = hdfs.project_path() + "Resources/predictor.py"
    lifecycle.create_or_update("idiom", "Models/iris", "PYTHON", predictor=script, settings=settings)
    with running(settings, "idiom") as serving:
        status, answer = http("POST", base_url(serving) + ":predict", {"instances": [[1, 2, 3, 4]]})
        assert status == 200 and answer["predictions"] == [10]


def test_a_path_outside_the_root_names_the_root(settings, model, tmp_path):
    stray = tmp_path / "elsewhere.py"
    stray.write_text(textwrap.dedent(PREDICTOR))
    with pytest.raises(defs.ServingError, match="is not under the hopsml root"):
        lifecycle.create_or_update("stray", "Models/iris", "PYTHON", predictor=str(stray), settings=settings)


@pytest.mark.parametrize("form", ["project-relative", "hopsworks namespace", "hdfs.project_path()", "hdfs:///"])
def test_hsml_deploy_takes_each_form_of_its_script_file(settings, model, monkeypatch, form):
    from hopsml import hopsworks

    monkeypatch.setenv("HOPSML_PROJECT", settings.project)   # login(project=) sets it for the process
    project = hopsworks.login(project=settings.project)
    deployment = project.get_model_registry().get_model("iris", 1).deploy(
        name="hsmlforms", script_file=_forms(settings, "Resources/predictor.py")[form])
    definition = defs.read(hdfs._storage_for(settings.root), settings.project, deployment.name)
    assert script_rel(hdfs._storage_for(settings.root), settings.project, definition, definition.predictor) == \
        layout.join(layout.project_dir(settings.project), "Resources/predictor.py")
    assert not hdfs.exists("Resources/Resources")          # nothing copied into Resources/ a second time


@pytest.mark.parametrize("form", ["project-relative", "root-relative", "hopsworks namespace", "hdfs.project_path()",
                                  "hdfs.abs_path()", "hdfs:///", "file://"])
def test_model_export_takes_each_form_of_a_project_path(settings, model, form):
    from hopsml.model import registry

    hdfs.dump(b"weights", "Resources/weights.bin")
    version = registry.export(_forms(settings, "Resources/weights.bin")[form], "weights", settings=settings)
    assert [f["path"] for f in version.files] == ["weights.bin"]
