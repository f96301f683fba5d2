"""Names that survive any path: a group and a view whose names hold spaces and any Unicode, under a root whose
path holds them too, work end to end (two inserts, reads, a view, training data written out and read back,
online vectors); names and roots holding what the Delta Lake library cannot keep are refused when the group or
view is made, naming the rule. An insert whose commit landed never raises: what fails after it is logged and
recorded. The Spark engine's side of the same is in tests/spark/test_featurestore_safety.py."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.errors import FeatureStoreError, InvalidNameError
from hopsml.featurestore.store import FeatureStore

T0 = dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc)
NAMES = ["with space", "ümlaut-名前", "emoji 😀 {x}*", "quote's \"dq\" `bt` ;&=+@!$~(,)"]


def _batch(keys, value):
    return pd.DataFrame({"id": keys, "ts": [T0 + dt.timedelta(hours=k) for k in keys],
                         "x": [float(value * k) for k in keys], "y": [k % 2 for k in keys]})


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A feature store under a root of `folder` in tmp_path (the readers find it through the environment)."""
    def make(folder="root with space ü名"):
        monkeypatch.setenv("HOPSML_ROOT", str(tmp_path / folder))
        monkeypatch.setenv("HOPSML_PROJECT", "p")
        monkeypatch.delenv("HOPSML_CONF", raising=False)
        return FeatureStore(config.load())
    return make


@pytest.mark.parametrize("name", NAMES)
def test_a_group_and_view_with_any_unicode_name_work_end_to_end(store, name):
    fs = store()
    fg = fs.create_feature_group(name, primary_key=["id"], event_time="ts", online_enabled=True)
    fg.insert(_batch([1, 2, 3, 4], 1.0))
    fg.insert(_batch([3, 4, 5, 6], 10.0))    # an upsert and new rows: the second insert read the first's files
    again = fs.get_feature_group(name)
    assert sorted(again.read()["x"]) == [1.0, 2.0, 30.0, 40.0, 50.0, 60.0]
    assert len(again.commit_details()) == 2 and fs.after_commit_problems(again) == []
    assert sorted(again.filter(again["x"] > 20).read()["id"]) == [3, 4, 5, 6]

    view = fs.create_feature_view(name, again.select_all(), labels=["y"])
    version, _ = view.create_training_data()
    from hopsml.data import reader

    rows = next(iter(reader(view.training_dataset_name(version), rank=0, world_size=1, split="train",
                            shuffle=False, batch_size=100)))
    assert len(rows["label"]) == 6
    x_train, x_test, _, _ = fs.get_feature_view(name).train_test_split(test_size=0.5, seed=1)
    assert len(x_train) + len(x_test) == 6

    view.init_serving()
    key, _, x = view.get_feature_vector({"id": 5})   # select_all(): the key and event time are features too (hsfs)
    assert (key, x) == (5, 50.0)


@pytest.mark.parametrize("name", ["a[1]", "b]", "pipe|d", "caret^", "50%", "%41", "what?", "hash#tag"])
def test_names_delta_cannot_keep_are_refused_when_made(store, name):
    fs = store()
    with pytest.raises(InvalidNameError, match="must not contain any of '\\[', '\\]'.*spaces and any other Unicode"):
        fs.create_feature_group(name, primary_key=["id"])
    good = fs.create_feature_group("good", primary_key=["id"], event_time="ts")
    good.insert(_batch([1], 1.0))
    with pytest.raises(InvalidNameError, match="feature view name"):
        fs.create_feature_view(name, good.select_all())


@pytest.mark.parametrize("name", ["red\x1b[31m", "new\nline", "tab\t", "nul\x00", "del\x7f", "\ud800"])
def test_control_characters_are_refused_in_any_name(store, name):
    fs = store("root")
    with pytest.raises(InvalidNameError, match="invalid feature group name"):
        fs.create_feature_group(name, primary_key=["id"])


def test_a_root_delta_cannot_keep_is_refused_naming_it(store):
    fs = store("root[1]")
    with pytest.raises(FeatureStoreError, match=r"root .*root\[1\] holds '\[', '\]'.*move the root"):
        fs.create_feature_group("fine", primary_key=["id"])


def test_an_insert_that_committed_never_raises(store, tmp_path, caplog):
    fs = store()
    fg = fs.create_feature_group("stats", primary_key=["id"], event_time="ts")
    fg.insert(_batch([1, 2], 1.0))
    folder = tmp_path / "root with space ü名" / "Projects" / "p" / "FeatureStore" / "stats_1" / "_statistics"
    for old in folder.iterdir():
        old.unlink()
    folder.rmdir()
    folder.write_text("a file where the statistics folder goes: writing statistics fails after the commit")
    fg.insert(_batch([3], 1.0))   # does not raise: the commit landed
    assert sorted(fs.get_feature_group("stats").read()["id"]) == [1, 2, 3]
    problems = fs.after_commit_problems(fg)
    assert [(p["commit"], p["step"]) for p in problems] == [(1, "statistics")]
    assert "commit 1 landed, but statistics failed" in caplog.text
