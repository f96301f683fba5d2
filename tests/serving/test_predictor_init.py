"""A predictor script's class is made as hsml's model server makes it: `__init__(self)`, `__init__(self, model)`
(the served version) or `__init__(self, async_logger, model)`; 2 of the 10 hopsworks tutorial predictors take
`model`, which could not load before."""

from __future__ import annotations

import textwrap

import pytest

from hopsml.model import registry
from hopsml.serving import loaders
from hopsml.serving.definition import ServingError

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
