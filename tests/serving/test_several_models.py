"""A serving of several models (`models=[...]`), started for real and asked over HTTP: its own model and its other
versions, other registered models loaded on their first request, the least recently used evicted past the bound, a
model that cannot load answering 503 for itself while the others answer, and the server's model list."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_nothing_left, export_sklearn, http, iris, recorded

from hopsml.model import registry
from hopsml.serving.control import lifecycle
from hopsml.serving.definition import Canary, Models, ServingError
from hopsml.serving.instance import inference_log

pytestmark = pytest.mark.filterwarnings("ignore:Stochastic Optimizer")


def _export_models(settings, tmp_path):
    """iris version 1 (logistic regression) and 2 (a decision tree), digits (an MLP), and 'broken' (not a model)."""
    import joblib
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier
    from sklearn.tree import DecisionTreeClassifier

    first = export_sklearn(settings, tmp_path / "iris1")
    x, y = iris()
    second = DecisionTreeClassifier(max_depth=1, random_state=0).fit(x, y)
    (tmp_path / "iris2").mkdir()
    joblib.dump(second, tmp_path / "iris2" / "model.joblib")
    registry.export(str(tmp_path / "iris2" / "model.joblib"), "iris", settings=settings)
    dx, dy = load_digits(return_X_y=True)
    digits = MLPClassifier(hidden_layer_sizes=(16,), max_iter=200, random_state=0).fit(dx, dy)
    (tmp_path / "digits").mkdir()
    joblib.dump(digits, tmp_path / "digits" / "model.joblib")
    registry.export(str(tmp_path / "digits" / "model.joblib"), "digits", settings=settings)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.joblib").write_bytes(b"these bytes are not a pickle")
    registry.export(str(tmp_path / "broken" / "model.joblib"), "broken", settings=settings)
    return first, second, digits, (x, dx)


def test_one_server_answers_for_several_models_loading_and_evicting_them(settings, tmp_path):
    first, second, digits, (x, dx) = _export_models(settings, tmp_path)
    lifecycle.create_or_update("multi", "Models/iris", "PYTHON",
                               models=Models(names=["digits", "broken"], max_loaded=2), settings=settings)
    serving = lifecycle.start("multi", settings=settings)
    root = f"http://127.0.0.1:{serving.internal_port}/v1/models"
    try:
        rows = x[::10].tolist()
        assert http("POST", f"{root}/multi:predict", {"instances": rows}) == \
            (200, {"predictions": first.predict(np.array(rows)).tolist()})
        assert http("POST", f"{root}/multi/versions/2:predict", {"instances": rows}) == \
            (200, {"predictions": second.predict(np.array(rows)).tolist()})
        assert first.predict(np.array(rows)).tolist() != second.predict(np.array(rows)).tolist()
        digit_rows = dx[:20].tolist()
        status, answer = http("POST", f"{root}/digits:predict", {"instances": digit_rows})   # loaded now: 3 > 2
        assert (status, answer) == (200, {"predictions": digits.predict(np.array(digit_rows)).tolist()})
        status, listed = http("GET", root)
        assert status == 200 and listed["models"] == ["broken", "digits", "multi"]
        assert [(m["name"], m["version"]) for m in listed["loaded"]] == [("digits", 1), ("multi", 2)]
        assert listed["evictions"] == 1 and listed["loads"] == 3
        status, refused = http("POST", f"{root}/broken:predict", {"instances": rows})
        assert status == 503 and refused["model"] == "broken" and "cannot be loaded" in refused["error"]
        assert http("POST", f"{root}/multi:predict", {"instances": rows})[0] == 200   # loaded again, evicting one
        assert http("POST", f"{root}/digits:predict", {"instances": digit_rows})[0] == 200
        status, unknown = http("POST", f"{root}/nothere:predict", {"instances": rows})
        assert status == 404 and "broken, digits, multi" in unknown["error"]
        status, missing = http("POST", f"{root}/digits/versions/7:predict", {"instances": digit_rows})
        assert status == 404 and "version 7" in missing["error"]
    finally:
        procs, port, host = recorded(settings, "multi")
        lifecycle.stop("multi", settings=settings)
    assert_nothing_left(procs, port, host)
    table = inference_log.read(inference_log.inference_log_path(settings, settings.project, "multi"),
                               ["model_name", "model_version", "status"])
    logged = set(zip(*(table.column(c).to_pylist() for c in ("model_name", "model_version", "status"))))
    assert {("iris", 1, 200), ("iris", 2, 200), ("digits", 1, 200), ("broken", 1, 503)} <= logged, logged


def test_a_serving_of_several_models_whose_own_model_cannot_load_fails_to_start(settings, tmp_path):
    _export_models(settings, tmp_path)
    lifecycle.create_or_update("bad", "Models/broken", "PYTHON", models=Models(names=["digits"]), settings=settings)
    with pytest.raises(ServingError, match="bad"):
        lifecycle.start("bad", timeout_s=120, settings=settings)
    assert lifecycle.get_status("bad", settings) == "Failed"


def test_the_definition_refuses_what_cannot_be_served_together(settings, tmp_path):
    _export_models(settings, tmp_path)
    with pytest.raises(ServingError, match="the serving's own model"):
        lifecycle.create_or_update("m", "Models/iris", "PYTHON", models=Models(names=["iris"]), settings=settings)
    with pytest.raises(ServingError, match="a canary needs a serving of one model"):
        lifecycle.create_or_update("m", "Models/iris", "PYTHON", models=Models(names=["digits"]),
                                   canary=Canary(version=2), settings=settings)
    with pytest.raises(ServingError, match=r"give Models\(names="):
        lifecycle.create_or_update("m", "Models/iris", "PYTHON", models=Models(max_loaded=2), settings=settings)
