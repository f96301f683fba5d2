"""Broken feature store records on the web view and in the SDK: a `_group.json` (or view.json, or a training
dataset's record) with fields of the wrong type is refused by the loader with an error naming the file and the
field, and shown as unreadable on the pages (which answered 500); a training dataset version whose write failed
after its record was written is listed as incomplete, never as normal, and naming its dataset is refused."""

from __future__ import annotations

import datetime as dt
import json
import re

import pandas as pd
import pytest

pytest.importorskip("flask")
pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config, layout
from hopsml.errors import FeatureStoreError, HopsmlError
from hopsml.featurestore.store import FeatureStore
from hopsml.records import BrokenRecordError
from hopsml.ui import create_app

PROJECT = "shop"
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


@pytest.fixture
def fs(root):
    store = FeatureStore(config.load(project=PROJECT))
    fg = store.create_feature_group("orders", primary_key=["id"], event_time="ts")
    fg.insert(pd.DataFrame({"id": [1, 2, 3, 4], "ts": [T0] * 4, "amount": [1.0, 2.0, 3.0, 4.0], "fraud": [0, 1, 0, 1]}))
    return store


def _get(client, path):
    response = client.get(path, headers={"Host": "localhost"})
    assert response.status_code == 200, response.data[:600]
    return response.get_data(as_text=True)


WRONG = [({"primary_key": [1]}, "primary_key[0]"), ({"primary_key": "id"}, "primary_key"),
         ({"features": "abc"}, "features"), ({"features": [1]}, "features[0]"),
         ({"features": [{"name": 1, "type": "int64"}]}, "features[0]"), ({"partition_key": [None]}, "partition_key[0]"),
         ({"online_enabled": "yes"}, "online_enabled"), ({"expectation_suite": "x"}, "expectation_suite"),
         ({"statistics_config": 5}, "statistics_config"), ({"ttl": "a day"}, "ttl"), ({"created": 5}, "created"),
         ({"version": "1"}, "version"), ({"event_time": 5}, "event_time"), ({"description": ["x"]}, "description"),
         ({"online_synced": 1}, "online_synced")]


@pytest.mark.parametrize("wrong, field", WRONG, ids=[f for _, f in WRONG])
def test_a_group_record_with_wrong_types_is_refused_naming_the_field_and_shown_broken(fs, wrong, field):
    path = layout.join(layout.feature_group_dir(PROJECT, "orders", 1), layout.GROUP_RECORD)
    record = {**fs.storage.read_json(path), **wrong}
    fs.storage.write_bytes(path, json.dumps(record).encode())

    with pytest.raises(BrokenRecordError, match=f"_group.json field '{re.escape(field)}.*orders_1/_group.json"):
        fs.get_feature_group("orders", 1)
    [(_, _, broken)] = fs.scan_groups()
    assert isinstance(broken, BrokenRecordError) and field in broken.reason

    client = create_app(config.load(project=PROJECT)).test_client()
    for page in (f"/p/{PROJECT}/featurestore/", f"/p/{PROJECT}/featurestore/groups/orders/1"):
        assert f"unreadable: FeatureStore/orders_1/_group.json cannot be read: _group.json field &#39;{field}" \
            in _get(client, page)


def test_view_and_training_dataset_records_with_wrong_types_are_shown_broken(fs):
    fg = fs.get_feature_group("orders", 1)
    view = fs.create_feature_view("fraud", fg.select_all(), labels=["fraud"])
    view.train_test_split(test_size=0.5, seed=1)
    view_path = layout.join(layout.feature_view_dir(PROJECT, "fraud", 1), layout.VIEW_RECORD)
    td_path = layout.join(layout.training_datasets_dir(PROJECT, "fraud", 1), "1", layout.TRAINING_DATASET_RECORD)
    fs.storage.write_bytes(view_path, json.dumps({**fs.storage.read_json(view_path), "logging": 5}).encode())
    fs.storage.write_bytes(td_path, json.dumps({**fs.storage.read_json(td_path), "rows": 7}).encode())

    client = create_app(config.load(project=PROJECT)).test_client()
    page = _get(client, f"/p/{PROJECT}/featurestore/views/fraud/1")
    assert "view.json field &#39;logging&#39; is a number" in page
    assert "training_dataset.json field &#39;rows&#39; is a number" in page
    assert "unreadable: FeatureStore/views/fraud_1/view.json" in _get(client, f"/p/{PROJECT}/featurestore/")


def test_a_training_dataset_whose_write_failed_is_listed_incomplete(fs):
    fg = fs.get_feature_group("orders", 1)
    view = fs.create_feature_view("fraud", fg.select_all(), labels=["fraud"])
    # a folder at the dataset's name (another job's leftovers) makes the write fail after the version's record
    fs.storage.makedirs(layout.dataset_dir(PROJECT, "fraud_1_td1"))
    with pytest.raises(HopsmlError, match="already exists"):
        view.create_training_data()
    written, _ = view.create_training_data()   # the next version is written whole
    assert written == 2

    states = {r["version"]: r["state"] for r in view.get_training_datasets()}
    assert states == {1: "INCOMPLETE", 2: "COMPLETE"}
    with pytest.raises(FeatureStoreError, match="version 1 of 'fraud_1' is incomplete: its dataset 'fraud_1_td1'"):
        view.training_dataset_name(1)
    assert view.training_dataset_name(2) == "fraud_1_td2"

    client = create_app(config.load(project=PROJECT)).test_client()
    page = _get(client, f"/p/{PROJECT}/featurestore/views/fraud/1")
    assert page.count("(incomplete: its write did not finish") == 1


def test_a_step_that_failed_after_a_commit_is_shown_on_the_group_page(fs, root):
    folder = root / "Projects" / PROJECT / "FeatureStore" / "orders_1" / layout.GROUP_STATISTICS
    for old in folder.iterdir():
        old.unlink()
    folder.rmdir()
    folder.write_text("a file where the statistics folder goes")
    fg = fs.get_feature_group("orders", 1)
    fg.insert(pd.DataFrame({"id": [5], "ts": [T0], "amount": [5.0], "fraud": [0]}))   # landed: does not raise

    client = create_app(config.load(project=PROJECT)).test_client()
    page = _get(client, f"/p/{PROJECT}/featurestore/groups/orders/1")
    assert 'id="after-commit"' in page and "after commit 1, statistics failed (the commit stands)" in page
