"""Canary rollouts: a serving holds a stable and a canary version; requests that name no version split by the
canary's percent, a version or a label (stable/canary) pins one, each version's requests are logged apart; the
gate promotes a canary whose traffic is clean and rolls back one whose served features skew from its own training
data, recording why. Real servers, real HTTP, real models."""

from __future__ import annotations

import pytest
from conftest import base_url, http, running, settings_for

from hopsml.model import registry
from hopsml.serving import Canary, InferenceLog
from hopsml.serving.control import lifecycle
from hopsml.serving.definition import ServingError
from hopsml.serving.instance import inference_log


def _constant_models(settings, tmp_path) -> None:
    """Two versions of model 'const': version 1 answers 0 for every row, version 2 answers 1."""
    import joblib
    from sklearn.dummy import DummyClassifier

    for version, answer in ((1, 0), (2, 1)):
        fitted = DummyClassifier(strategy="constant", constant=answer).fit([[0.0, 0.0]] * 2, [answer, 1 - answer])
        folder = tmp_path / f"v{version}"
        folder.mkdir()
        joblib.dump(fitted, folder / "model.joblib")
        registry.export(str(folder / "model.joblib"), "const", settings=settings)


def test_requests_split_by_the_canary_percent_and_pin_a_version_or_label(settings, tmp_path):
    _constant_models(settings, tmp_path)
    with pytest.raises(ServingError, match="is the stable version itself"):
        lifecycle.create_or_update("split", "Models/const", "PYTHON", model_version=2, canary=Canary(version=2),
                                   settings=settings)
    with pytest.raises(ServingError, match="no version 7|version 7"):
        lifecycle.create_or_update("split", "Models/const", "PYTHON", model_version=1, canary=Canary(version=7),
                                   settings=settings)
    made = lifecycle.create_or_update("split", "Models/const", "PYTHON", model_version=1,
                                      canary=Canary(version=2, traffic_percent=30),
                                      inference_log=InferenceLog(roll_seconds=3600), settings=settings)
    assert (made.model_version, made.canary_version, made.canary_traffic_percent) == (1, 2, 30)
    with running(settings, "split") as serving:
        url = base_url(serving)
        answers = []
        for _ in range(300):
            status, body = http("POST", url + ":predict", {"instances": [[1.0, 2.0]]})
            assert status == 200
            answers.append(body["predictions"][0])
        assert 50 <= sum(answers) <= 130            # about 30% to the canary (90 expected; 4 sigma either side)
        assert http("POST", url + "/versions/2:predict", {"instances": [[1.0, 2.0]]})[1]["predictions"] == [1]
        assert http("POST", url + "/labels/canary:predict", {"instances": [[1.0, 2.0]]})[1]["predictions"] == [1]
        assert http("POST", url + "/labels/stable:predict", {"instances": [[1.0, 2.0]]})[1]["predictions"] == [0]
        status, body = http("POST", url + "/labels/beta:predict", {"instances": [[1.0, 2.0]]})
        assert status == 404 and "labels are stable (version 1) and canary (version 2)" in body["error"]
        v2 = f"http://{serving.internal_ips[0]}:{serving.internal_port}/v2/models/split/versions/2/infer"
        status, body = http("POST", v2, {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP64",
                                                     "data": [1.0, 2.0]}]})
        assert status == 200 and body["model_version"] == "2" and body["outputs"][0]["data"] == [1]
    logged = inference_log.read(inference_log.inference_log_path(settings, settings.project, "split"),
                                ["model_version", "response"])
    versions = logged.column("model_version").to_pylist()
    responses = logged.column("response").to_pylist()
    assert set(versions) == {1, 2}
    assert all(('[1]' in r) == (v == 2) for v, r in zip(versions, responses) if '"predictions"' in r)


@pytest.fixture(scope="module")
def versions(tmp_path_factory, spark):
    """(root, train rows): iris prepared (standardized), and two logistic regressions of it (C=1 and C=0.5)
    exported from a run that read the train split, so each version's lineage names the dataset."""
    import joblib
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from hopsml import layout
    from hopsml.data import prepare_table, samples
    from hopsml.data.readers import reader
    from hopsml.fs import Storage
    from hopsml.tracking.run_context import active_run

    base = tmp_path_factory.mktemp("canary")
    settings = settings_for(base / "root")
    csv = str(base / "iris.csv")
    samples.write_table(csv, bad_rows=False)
    prepare_table(csv, "iris", label="species", standardize=True, settings=settings, spark=spark)
    for run, c in ((1, 1.0), (2, 0.5)):
        with active_run(Storage(settings.root), layout.ExperimentDir.of("test", "local-1", run)):
            batches = list(reader("iris", split="train", shuffle=False, settings=settings))
            features = np.concatenate([b["features"] for b in batches]).astype(np.float64)
            labels = np.concatenate([b["label"] for b in batches])
            joblib.dump(LogisticRegression(C=c, max_iter=500).fit(features, labels), str(base / f"m{run}.joblib"))
            registry.export(str(base / f"m{run}.joblib"), "iris", settings=settings)
    return base / "root", features


def _traffic(serving, rows, path: str = ":predict") -> None:
    for start in range(0, len(rows), 10):
        status, _ = http("POST", base_url(serving) + path, {"instances": rows[start:start + 10].tolist()})
        assert status == 200


def test_the_gate_promotes_a_canary_whose_traffic_is_clean(versions):
    from hopsml.serving.control import canary

    root, features = versions
    settings = settings_for(root)
    lifecycle.create_or_update("clean", "Models/iris", "PYTHON", model_version=1,
                               canary=Canary(version=2, traffic_percent=50),
                               inference_log=InferenceLog(roll_seconds=3600), settings=settings)
    with running(settings, "clean") as serving:
        _traffic(serving, features, "/labels/stable:predict")
        _traffic(serving, features, "/labels/canary:predict")
    waiting = canary.gate("clean", min_requests=10_000, settings=settings)
    assert waiting["decision"] == "waiting" and lifecycle.get("clean", settings).canary_version == 2
    report = canary.gate("clean", min_requests=5, max_p99_ratio=50.0, settings=settings)   # latency: a busy host
    assert report["decision"] == "promoted", report["reasons"]
    assert report["figures"]["skew"]["drifted"] == [] and report["figures"]["prediction_psi"] < 0.2
    promoted = lifecycle.get("clean", settings)
    assert (promoted.model_version, promoted.canary_version) == (2, None)
    assert canary.last_decision("clean", settings)["decision"] == "promoted"


def test_the_gate_rolls_back_a_canary_whose_served_features_skew_and_says_why(versions):
    from hopsml.serving.control import canary

    root, features = versions
    settings = settings_for(root)
    lifecycle.create_or_update("skewed", "Models/iris", "PYTHON", model_version=1,
                               canary=Canary(version=2, traffic_percent=10),
                               inference_log=InferenceLog(roll_seconds=3600), settings=settings)
    shifted = features.copy()
    shifted[:, 1] += 2.0                                   # sepal_width, two standard deviations up
    with running(settings, "skewed") as serving:
        _traffic(serving, features, "/labels/stable:predict")
        _traffic(serving, shifted, "/labels/canary:predict")
    report = canary.gate("skewed", min_requests=5, max_p99_ratio=50.0, settings=settings)
    assert report["decision"] == "rolled back"
    assert any("skew from its training dataset 'iris': sepal_width" in r for r in report["reasons"]), report
    back = lifecycle.get("skewed", settings)
    assert (back.model_version, back.canary_version) == (1, None)
    with pytest.raises(ServingError, match="has no canary"):
        canary.promote("skewed", settings=settings)
    from hopsml.ui import create_app

    page = create_app(settings).test_client().get("/p/test/servings/skewed").get_data(as_text=True)
    assert "version 2 rolled back" in page and "skew from its training dataset &#39;iris&#39;" in page


def test_the_cli_creates_a_canary_and_rolls_it_back(settings, tmp_path, capsys):
    from hopsml import cli

    _constant_models(settings, tmp_path)
    argv = ["--root", settings.root, "--project", settings.project, "serving"]
    assert cli.main([*argv, "create", "two", "Models/const", "--version", "1", "--canary-version", "2",
                     "--canary-percent", "20"]) == 0
    assert "serves const version 1, canary version 2 at 20%" in capsys.readouterr().out
    assert cli.main([*argv, "canary-gate", "two", "--min-requests", "1", "--dry-run"]) == 0
    assert "canary version 2 waiting" in capsys.readouterr().out     # no traffic logged yet
    assert cli.main([*argv, "rollback", "two"]) == 0
    assert "canary version 2 rolled back" in capsys.readouterr().out
    assert lifecycle.get("two", settings).canary_version is None


class Hammer:
    """A client sending one request after another (a new connection each, no retries) until stopped: every
    answer's prediction, and every failure (a refused or reset connection, an error status) as it came."""

    def __init__(self, url: str) -> None:
        import threading

        self.url, self.answers, self.failures = url, [], []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                status, body = http("POST", self.url + ":predict", {"instances": [[1.0, 2.0]]})
            except OSError as exc:   # refused, reset, timed out: what a restart costs a client
                self.failures.append(repr(exc))
                continue
            if status != 200:
                self.failures.append(f"{status}: {body}")
            else:
                self.answers.append(body["predictions"][0])

    def next_answers(self, count: int) -> list:
        """The next `count` answers after this call (bounded: at most 60 s)."""
        import time

        start, deadline = len(self.answers), time.monotonic() + 60
        while len(self.answers) < start + count:
            assert time.monotonic() < deadline, f"fewer than {count} answers in 60 s; failures: {self.failures[:3]}"
            time.sleep(0.01)
        return self.answers[start:start + count]

    def stop(self) -> None:
        self.halt.set()
        self.thread.join(timeout=60)


def test_a_canary_is_added_promoted_and_rolled_back_in_place_while_a_client_gets_every_answer(settings, tmp_path):
    """No restart: the port and the server stay, the new instances start beside the old ones, which drain once the
    new are ready; a client that never retries sees no refused connection and no error throughout."""
    from hopsml.fs import Storage
    from hopsml.serving.control import canary
    from hopsml.serving.server import state as states

    _constant_models(settings, tmp_path)
    lifecycle.create_or_update("nonstop", "Models/const", "PYTHON", model_version=1, settings=settings)
    with running(settings, "nonstop") as serving:
        supervisor = states.read(Storage(settings.root), settings.project, "nonstop").supervisor
        hammer = Hammer(base_url(serving))
        try:
            assert set(hammer.next_answers(20)) == {0}
            added = canary.deploy("nonstop", 2, traffic_percent=50, settings=settings)
            assert (added.canary_version, added.internal_port) == (2, serving.internal_port)
            assert set(hammer.next_answers(60)) == {0, 1}             # the split, from the new instances only
            promoted = canary.promote("nonstop", settings=settings)
            assert (promoted.model_version, promoted.canary_version) == (2, None)
            assert set(hammer.next_answers(30)) == {1}                # the old instances are gone when it returns
            canary.deploy("nonstop", 1, traffic_percent=50, settings=settings)
            assert set(hammer.next_answers(60)) == {0, 1}
            back = canary.rollback("nonstop", settings=settings)
            assert (back.model_version, back.canary_version, back.internal_port) == (2, None, serving.internal_port)
            assert set(hammer.next_answers(30)) == {1}
        finally:
            hammer.stop()
        assert hammer.failures == [] and len(hammer.answers) >= 200, hammer.failures[:5]
        st = states.read(Storage(settings.root), settings.project, "nonstop")
        assert (st.supervisor, st.reloads, st.reload_error) == (supervisor, 4, None)   # no restart: four reloads
        assert st.port == int(serving.internal_port)


def test_a_version_that_cannot_load_leaves_the_running_serving_as_it_was(settings, tmp_path):
    from hopsml.serving.control import canary

    _constant_models(settings, tmp_path)
    broken = tmp_path / "broken" / "model.joblib"
    broken.parent.mkdir()
    broken.write_bytes(b"not a model")
    registry.export(str(broken), "const", settings=settings)          # version 3
    lifecycle.create_or_update("steady", "Models/const", "PYTHON", model_version=1, settings=settings)
    with running(settings, "steady") as serving:
        with pytest.raises(ServingError, match="could not take its new definition and serves on as before"):
            canary.deploy("steady", 3, traffic_percent=50, settings=settings)
        after = lifecycle.get("steady", settings)
        assert (after.model_version, after.canary_version, after.internal_port) == (1, None, serving.internal_port)
        assert all(http("POST", base_url(serving) + ":predict", {"instances": [[1.0, 2.0]]})[1]["predictions"] == [0]
                   for _ in range(20))
