"""A feature view's written training dataset read by its view (`fv:<view>:<version>/td<n>`) as ranks read it,
outside a run (rank and world size given): the split's rows as the view returns them, the prepared datasets'
sharding rule, and errors that say what exists. The 2-rank run is tests/spark/test_featurestore_ranks.py."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.data import dataset as ds
from hopsml.data import reader
from hopsml.data.training_datasets import TrainingDatasetNotFoundError, TrainingDatasetRef
from hopsml.errors import FeatureStoreError, InvalidNameError, SettingsError
from hopsml.featurestore.store import FeatureStore
from hopsml.featurestore.transformations import min_max_scaler

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


@pytest.fixture
def fv(root):
    fs = FeatureStore(config.load())
    rng = np.random.default_rng(4)
    rows = 40
    frame = pd.DataFrame({"tx": np.arange(rows),
                          "ts": [T0 + dt.timedelta(minutes=int(m)) for m in rng.permutation(rows)],
                          "amount": rng.gamma(2.0, 20.0, rows).round(2), "items": rng.integers(1, 9, rows),
                          "fraud": rng.integers(0, 2, rows)})
    fg = fs.create_feature_group("tx", primary_key=["tx"], event_time="ts")
    fg.insert(frame)
    return fs.create_feature_view("fraud", fg.select(["tx", "amount", "items", "fraud"]), labels=["fraud"],
                                  transformation_functions=[min_max_scaler("amount")])


def _rows(ref: str, split: str | None = None, rank: int = 0, world_size: int = 1, fields=None) -> pd.DataFrame:
    """Every row of `ref`'s split this rank reads, by the named fields."""
    batches = list(reader(ref, rank, world_size, split=split, fields=fields, shuffle=False, batch_size=7))
    return pd.DataFrame({name: np.concatenate([b[name] for b in batches]) for name in fields})


def test_the_whole_set_and_each_split_read_as_the_view_returns_them(fv):
    whole, _ = fv.create_training_data(shards=2)
    X, y = fv.get_training_data(whole)
    fields = [*X.columns, "label"]
    assert "min_max_scaler_amount_" in fields and "amount" not in fields   # written transformed
    read = _rows(f"fv:fraud:1/td{whole}", fields=fields)   # a version without a split: all its rows are 'train'
    expected = X.assign(label=y["fraud"])
    pd.testing.assert_frame_equal(read.sort_values("tx", ignore_index=True), expected.sort_values(
        "tx", ignore_index=True), check_dtype=False)

    split, _ = fv.create_train_test_split(test_size=0.3, seed=5, shards=2)
    X_train, X_test, y_train, y_test = fv.get_train_test_split(split)
    for name, X_split, y_split in (("train", X_train, y_train), ("test", X_test, y_test)):
        halves = [_rows(f"fv:fraud:1/td{split}", name, rank, 2, fields) for rank in range(2)]
        assert len(halves[0]) and len(halves[1]) and not set(halves[0]["tx"]) & set(halves[1]["tx"])
        both = pd.concat(halves).sort_values("tx", ignore_index=True)
        pd.testing.assert_frame_equal(both, X_split.assign(label=y_split["fraud"]).sort_values("tx", ignore_index=True),
                                      check_dtype=False)


def test_fewer_shards_than_ranks_is_refused_as_for_a_prepared_dataset(fv):
    version, _ = fv.create_train_test_split(test_size=0.3, seed=5, shards=2)
    with pytest.raises(ds.DatasetError, match=rf"fv:fraud:1/td{version} .*split 'train' has 2 row groups, fewer than "
                                              r"the 3 ranks.*create another version with shards>=3"):
        reader(f"fv:fraud:1/td{version}", 0, 3)


def test_unknown_names_say_what_exists(fv):
    written, _ = fv.create_train_test_split(test_size=0.3, seed=5, shards=2)
    fv.train_test_split(test_size=0.3, seed=5)   # a version kept in its record only: no files
    in_memory = fv.get_last_accessed_training_dataset()
    gone, _ = fv.create_train_test_split(test_size=0.3, seed=6, shards=2)
    storage = fv.store.storage
    storage.delete(ds.DatasetDir.of(fv.store.project, fv.training_dataset_name(gone)).success)

    with pytest.raises(TrainingDatasetNotFoundError, match=r"no feature view 'nope' in project 'test'; its views: "
                                                           r"fraud \(versions 1\)"):
        reader("fv:nope:1/td1")
    with pytest.raises(FeatureStoreError, match="feature view 'fraud' has no version 2 .*its versions: 1"):
        reader("fv:fraud:2/td1")
    with pytest.raises(ds.DatasetNotFoundError, match=rf"no training dataset version 9; its training dataset "
                                                      rf"versions: {written}, {in_memory} \(in memory\), {gone} "
                                                      r"\(incomplete\)"):
        reader("fv:fraud:1/td9")
    with pytest.raises(TrainingDatasetNotFoundError, match="taken in memory.*create_train_test_split"):
        reader(f"fv:fraud:1/td{in_memory}")
    with pytest.raises(TrainingDatasetNotFoundError, match=rf"incomplete: its dataset 'fraud_1_td{gone}' is not there"):
        reader(f"fv:fraud:1/td{gone}")
    with pytest.raises(SettingsError, match=rf"fv:fraud:1/td{written} \(training dataset version {written} of feature "
                                            r"view 'fraud' version 1, dataset .*has no split 'validation'; it has "
                                            r"test, train"):
        reader(f"fv:fraud:1/td{written}", split="validation")


def test_a_malformed_reference_shows_the_form():
    with pytest.raises(InvalidNameError, match=r"'fv:fraud/td1' is not a training dataset reference: it names no "
                                               r"feature view and version.*fv:<view>:<version>/td<n>"):
        TrainingDatasetRef.parse("fv:fraud/td1")
    with pytest.raises(InvalidNameError, match=r"give the split as the readers' split= \(e.g. "
                                               r"reader\('fv:fraud:1/td1', split='train'\)\)"):
        TrainingDatasetRef.parse("fv:fraud:1/td1/train")
    with pytest.raises(InvalidNameError, match="names no training dataset version"):
        TrainingDatasetRef.parse("fv:fraud:1/2")
    with pytest.raises(InvalidNameError, match="versions start at 1"):
        TrainingDatasetRef.parse("fv:fraud:0/td1")
    assert TrainingDatasetRef.parse("fv:a:b:3/td4") == TrainingDatasetRef("a:b", 3, 4)
