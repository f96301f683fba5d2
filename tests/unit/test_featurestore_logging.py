"""Feature logging as hsfs has it: a feature view logs what a model was given (untransformed and transformed)
and what it predicted, with the training dataset version and model; log() buffers, materialize_log() commits,
read_log() filters; paused logging commits only on demand; a process killed between a commit and the buffer's
cleanup neither loses nor doubles a row; several processes log at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from test_featurestore_views import _view

from hopsml import hopsworks
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import feature_log
from hopsml.hopsworks.hsfs.builtin_transformations import min_max_scaler


@pytest.fixture
def project(root):
    return hopsworks.login(project="shop")


@pytest.fixture
def scored(project, tmp_path):
    """A view with a training dataset version, ready for batch scoring, and a model registered on it."""
    fs, fg, fv = _view(project, transformation_functions=[min_max_scaler("amount")])
    fv.train_test_split(test_size=0.2, seed=3)
    fv.init_batch_scoring(1)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "w.txt").write_text("1")
    model = project.get_model_registry().python.create_model("fraud", feature_view=fv, training_dataset_version=1)
    model.save(str(model_dir))
    return fs, fv, model


def test_log_materialize_and_read_back_untransformed_transformed_and_predictions(scored):
    fs, fv, model = scored
    batch = fv.get_batch_data(transformed=False)
    transformed = fv.transform(batch)
    predictions = (batch["amount"] > 60).astype(int).to_numpy()
    assert fv.log(batch, transformed_features=transformed, predictions=predictions, model=model) == len(batch)
    assert fv.read_log().empty                       # buffered, not committed yet
    assert fv.materialize_log(wait=True) == {"rows": len(batch), "files": 1}
    assert fs.get_feature_view("fraud", 1).logging_enabled   # the first log() enabled logging, and it is saved

    logged = fv.read_log()
    assert len(logged) == len(batch)
    assert list(logged.columns[:5]) == list(feature_log.META)
    assert set(logged["training_dataset_version"]) == {1}    # from init_batch_scoring
    assert set(logged["model_name"]) == {"fraud"} and set(logged["model_version"]) == {model.version}
    assert np.allclose(np.sort(logged["amount"]), np.sort(batch["amount"]))
    assert sorted(logged["predicted_fraud"]) == sorted(predictions.tolist())
    scaled = fv.read_log(transformed=True)
    assert "min_max_scaler_amount_" in scaled.columns and "amount" not in scaled.columns
    assert np.allclose(np.sort(scaled["min_max_scaler_amount_"]), np.sort(transformed["min_max_scaler_amount_"]))

    assert len(fv.read_log(filter=fv.query.left.amount > 60)) == int(predictions.sum())
    assert len(fv.read_log(training_dataset_version=2)) == 0
    assert len(fv.read_log(model=model)) == len(batch)
    later = pd.Timestamp.now(tz="UTC") + pd.Timedelta(minutes=1)
    assert fv.read_log(start_time=later).empty and len(fv.read_log(end_time=later)) == len(batch)
    timeline = fv.get_log_timeline()
    assert len(timeline) == 1 and timeline[0]["rows"] == len(batch)


def test_lists_vectors_and_label_columns_and_what_log_refuses(scored):
    fs, fv, model = scored
    one = fv.get_batch_data(transformed=False).iloc[0]
    fv.log([one["amount"], one["country"], one["age"]], predictions=[1])      # one feature vector, as a list
    fv.log(pd.DataFrame({"amount": [5.0, 6.0], "country": ["SE", "DE"], "age": [30, 40], "fraud": [0, 1]}))
    fv.materialize_log()
    logged = fv.read_log()
    assert logged["predicted_fraud"].tolist() == [1, 0, 1]      # a label-named column is the prediction
    assert logged["training_dataset_version"].tolist() == [1, 1, 1]
    with pytest.raises(FeatureStoreError, match="column 'colour', which is not one of its features"):
        fv.log(pd.DataFrame({"amount": [1.0], "colour": ["red"]}))
    with pytest.raises(FeatureStoreError, match="2 predictions for 1 rows"):
        fv.log(pd.DataFrame({"amount": [1.0]}), predictions=[0, 1])
    with pytest.raises(FeatureStoreError, match="rows have 2 values; give 3"):
        fv.log([[1.0, "SE"]])
    with pytest.raises(FeatureStoreError, match="needs features"):
        fv.log(predictions=[1])
    fv.delete_log()
    assert fv.read_log().empty and fv.get_log_timeline() == []


def test_paused_logging_commits_only_on_demand_and_a_due_buffer_commits_itself(scored, monkeypatch):
    fs, fv, model = scored
    monkeypatch.setattr(feature_log, "AUTO_FILES", 3)
    fv.pause_logging()
    for _ in range(4):
        fv.log(pd.DataFrame({"amount": [1.0], "age": [20]}))
    assert fv.read_log().empty and len(feature_log.FeatureLog(fv).pending()) == 4
    fv.resume_logging()
    assert not fs.get_feature_view("fraud", 1)._logging["paused"]
    fv.log(pd.DataFrame({"amount": [2.0], "age": [21]}))     # the fifth file: due, so log() commits the buffer
    assert len(fv.read_log()) == 5 and feature_log.FeatureLog(fv).pending() == []


def test_a_commit_whose_buffer_cleanup_was_killed_is_not_committed_twice(scored):
    fs, fv, model = scored
    fv.log(pd.DataFrame({"amount": [1.0, 2.0], "age": [20, 21]}))
    log = feature_log.FeatureLog(fv)
    kept = {n: open(os.path.join(log.buffer, n), "rb").read() for n in log.pending()}
    log.materialize()
    for name, data in kept.items():        # as if the process died after the commit, before deleting its files
        with open(os.path.join(log.buffer, name), "wb") as handle:
            handle.write(data)
    fv.log(pd.DataFrame({"amount": [3.0], "age": [22]}))
    assert fv.materialize_log() == {"rows": 1, "files": 1}
    assert sorted(fv.read_log()["amount"]) == [1.0, 2.0, 3.0]


def test_processes_logging_at_once_lose_no_row(scored, root):
    fs, fv, model = scored
    script = textwrap.dedent("""
        import pandas as pd
        from hopsml import hopsworks
        fv = hopsworks.login(project="shop").get_feature_store().get_feature_view("fraud", 1)
        for i in range(10):
            fv.log(pd.DataFrame({"amount": [float(i)], "age": [int(__import__("sys").argv[1])]}))
            if i % 4 == 3:
                fv.materialize_log()
    """)
    env = {**os.environ, "HOPSML_ROOT": str(root)}
    workers = [subprocess.Popen([sys.executable, "-c", script, str(n)], env=env) for n in range(3)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0, 0]
    fv.materialize_log()
    logged = fv.read_log()
    assert len(logged) == 30 and logged["log_id"].is_unique
    assert sorted(logged.groupby("age").size().tolist()) == [10, 10, 10]
