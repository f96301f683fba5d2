"""A predictor script's class is made as hsml's model server makes it: `__init__(self)`, `__init__(self, model)`
(the served version) or `__init__(self, async_logger, model)`; 2 of the 10 hopsworks tutorial predictors take
`model`, which could not load before."""

from __future__ import annotations

import textwrap

import pytest
from conftest import base_url, export_sklearn, http, running

from hopsml.model import registry
from hopsml.serving.control import lifecycle
from hopsml.serving.definition import ServingError
from hopsml.serving.instance import loaders

FORMS = {
    "plain": "def __init__(self):\n        self.model = None",
    "model": "def __init__(self, model):\n        self.model = model",
    "logger_and_model": "def __init__(self, async_logger, model):\n"
                        "        self.model, self.logger = model, async_logger",
}


def _script(tmp_path, init: str) -> str:
    path = tmp_path / "predictor.py"
    path.write_text(textwrap.dedent("""
        import json, os

        class Predict:
            {init}

            def predict(self, inputs):
                with open(os.path.join(os.environ["MODEL_FILES_PATH"], "model.json")) as stream:
                    scale = json.load(stream)["scale"]
                return [scale * sum(row) for row in inputs]
    """).replace("{init}", init))
    return str(path)


@pytest.mark.parametrize("form", list(FORMS))
def test_every_init_form_of_hsml_loads_and_answers(settings, tmp_path, form):
    folder = tmp_path / "xgb"
    folder.mkdir()
    (folder / "model.json").write_text('{"scale": 2}')     # the model file keeps its name beside the record
    mv = registry.export(str(folder), "scaler", settings=settings)
    version_dir = registry.download_model("scaler", mv.version, local_dir=str(tmp_path / "local"), settings=settings)
    servable = loaders.load(version_dir, _script(tmp_path, FORMS[form]))
    assert servable.call([[1, 2], [3, 4]]) == [6, 14]
    given = servable.predictor.model
    if form == "plain":
        assert given is None
    else:
        assert (given.name, given.version, given.model_files_path) == ("scaler", mv.version, version_dir)
        assert given.record.name == "scaler"
    if form == "logger_and_model":
        assert servable.predictor.logger is None


def test_an_init_asking_for_something_else_says_what_hsml_passes(settings, tmp_path):
    with pytest.raises(ServingError, match=r"Predict.__init__ asks for 'config'; hsml's model server passes `model` "
                                           r"and `async_logger`"):
        loaders.load(str(tmp_path), _script(tmp_path, "def __init__(self, config):\n        pass"))


# What pyspark.sql.connect does when great_expectations imports it and grpc is not installed: a process whose
# __main__ has neither __spec__ nor __file__ is taken for a doctest run, and exits with code 0.
EXITS_LIKE_PYSPARK_CONNECT = textwrap.dedent("""
    import sys

    main = sys.modules["__main__"]
    if main.__spec__ is None and not hasattr(main, "__file__") and not hasattr(sys, "ps1"):
        sys.exit(0)

    class Predict:
        def predict(self, inputs):
            return [len(row) for row in inputs]
""")


def test_a_script_that_ends_the_process_while_loading_fails_the_load_naming_it(tmp_path):
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(ServingError, match=r"the predictor script .*exits.py ended the process \(SystemExit\(0\)\) "
                                           r"while importing it"):
        loaders.load(str(tmp_path), str(path))
    path.write_text("import sys\n\nclass Predict:\n    def __init__(self):\n        sys.exit(3)\n")
    with pytest.raises(ServingError, match=r"ended the process \(SystemExit\(3\)\) while making its Predict"):
        loaders.load(str(tmp_path), str(path))


def test_an_instance_runs_a_script_as_a_program_would(settings, tmp_path):
    """The fraud_online tutorial's predictor reaches great_expectations (its feature view's groups carry
    expectation suites), which imports pyspark.sql.connect: under `python -c` the instance exited with code 0
    while loading ("exited with code 0 while loading the model")."""
    export_sklearn(settings, tmp_path / "model")
    resources = tmp_path / "root" / "Projects" / "test" / "Resources"
    resources.mkdir(parents=True, exist_ok=True)
    (resources / "program.py").write_text(EXITS_LIKE_PYSPARK_CONNECT)
    lifecycle.create_or_update("program", "Models/iris", "PYTHON", predictor="Resources/program.py",
                               settings=settings)
    with running(settings, "program") as serving:
        assert http("POST", base_url(serving) + ":predict", {"instances": [[1, 2, 3], [4]]}) == \
            (200, {"predictions": [3, 1]})


MODEL_FEATURE_VIEW = textwrap.dedent("""
    class Predict:
        def __init__(self, model):
            self.view = model.get_feature_view()     # as hsml's templates do inside a deployment

        def predict(self, inputs):
            return [self.view.get_feature_vector({"card": row[0]}) for row in inputs]
""")


def test_the_model_given_to_a_script_opens_its_feature_view_for_serving(root, tmp_path):
    """hsml hands `__init__(self, model)` its Model: `model.get_feature_view()` is the view the version was saved
    with, initialised for serving with its training dataset version (the online-inference benchmark's predictor)."""
    pytest.importorskip("deltalake")
    import pandas as pd

    from hopsml import hopsworks

    project = hopsworks.login()
    fs = project.get_feature_store()
    cards = fs.create_feature_group("cards", primary_key=["card"], online_enabled=True)
    cards.insert(pd.DataFrame({"card": [1, 2, 3, 4], "amount": [10.0, 20.0, 30.0, 40.0], "fraud": [0, 1, 0, 1]}))
    view = fs.create_feature_view("cards", query=cards.select(["amount", "fraud"]), labels=["fraud"])
    first, _ = view.create_training_data()
    second, _ = view.create_training_data()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.txt").write_text("1")
    model = project.get_model_registry().python.create_model("cards", feature_view=view,
                                                            training_dataset_version=first)
    model.save(str(tmp_path / "model"))
    version_dir = model.download(str(tmp_path / "served"))
    script = tmp_path / "predict.py"
    script.write_text(MODEL_FEATURE_VIEW)

    servable = loaders.load(version_dir, str(script))
    opened = servable.predictor.view
    assert (opened.name, opened.version, opened._serving) == ("cards", 1, first) and second != first
    assert servable.call([[2], [4]]) == [[20.0], [40.0]]
    assert loaders.served_model(str(tmp_path)).get_feature_view() is None   # a version saved without a view
