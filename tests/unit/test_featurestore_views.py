"""A hopsworks program end to end on hopsml (login -> feature store -> groups -> view -> train_test_split ->
registry), and what a feature view promises: a training dataset version returns the same rows every time,
transformation functions are fitted on the training split only and applied the same way to batch data."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import hopsworks
from hopsml.errors import FeatureStoreError
from hopsml.hopsworks.hsfs import udf
from hopsml.hopsworks.hsfs.builtin_transformations import (
    label_encoder,
    min_max_scaler,
    one_hot_encoder,
    standard_scaler,
)

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


@pytest.fixture
def project(root):
    return hopsworks.login(project="shop", host="c.app.hopsworks.ai", api_key_value="secret")


def _tables(rows: int = 200, seed: int = 0):
    rng = np.random.default_rng(seed)
    customers = pd.DataFrame({"CustomerID": np.arange(20), "since": [T0 - dt.timedelta(days=400)] * 20,
                              "country": rng.choice(["SE", "DE", "FR"], 20), "age": rng.integers(18, 80, 20)})
    orders = pd.DataFrame({"CustomerID": rng.integers(0, 20, rows),
                           "ts": [T0 + dt.timedelta(minutes=int(m)) for m in rng.permutation(10_000)[:rows]],
                           "amount": rng.gamma(2.0, 30.0, rows).round(2),
                           "fraud": rng.integers(0, 2, rows)})
    return customers, orders


def _view(project, **kwargs):
    fs = project.get_feature_store()
    customers, orders = _tables()
    profiles = fs.get_or_create_feature_group("customers", version=1, primary_key=["CustomerID"],
                                              event_time="since", description="who buys")
    profiles.insert(customers)
    fg = fs.get_or_create_feature_group("orders", version=1, primary_key=["CustomerID", "ts"], event_time="ts")
    fg.insert(orders)
    query = fg.select(["customerid", "ts", "amount", "fraud"]).join(profiles.select(["country", "age"]))
    return fs, fg, fs.get_or_create_feature_view("fraud", version=1, query=query, labels=["fraud"], **kwargs)


def test_a_hopsworks_program_runs_unchanged(project, tmp_path):
    assert project.name == "shop" and project.connection["host"] == "c.app.hopsworks.ai"
    assert project.connection["api_key"] == "given"  # recorded that one was given, never the key itself
    fs, fg, fv = _view(project, transformation_functions=[min_max_scaler("amount"), label_encoder("country")])
    X_train, X_test, y_train, y_test = fv.train_test_split(test_size=0.2, seed=7)
    assert len(X_train) + len(X_test) == 200 and 20 <= len(X_test) <= 60
    assert list(y_train.columns) == ["fraud"] and len(y_train) == len(X_train)
    assert {"customerid", "ts"} <= set(X_train.columns)  # the query selects them: features, as hsfs keeps them
    assert {"min_max_scaler_amount_", "label_encoder_country_", "age"} <= set(X_train.columns)
    assert "amount" not in X_train.columns  # the scaled output replaces its input
    scaled = X_train["min_max_scaler_amount_"]
    assert scaled.min() == pytest.approx(0.0) and scaled.max() == pytest.approx(1.0)  # fitted on train only
    assert set(X_train["label_encoder_country_"]) <= {0, 1, 2}

    mr = project.get_model_registry()
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "weights.txt").write_text("0.5")
    model = mr.python.create_model("fraud", metrics={"auc": 0.9}, description="gbt", input_example=X_train.head(1),
                                   feature_view=fv, training_dataset_version=1)
    model.save(str(model_dir))
    again = mr.get_model("fraud", version=model.version)
    assert again.training_metrics == {"auc": 0.9} and again.framework == "python"
    assert open(f"{again.download()}/weights.txt").read() == "0.5"
    assert mr.get_best_model("fraud", "auc", "max").version == model.version
    linked = again.get_feature_view()
    assert linked.name == "fraud" and [f.name for f in linked.transformation_functions] == ["min_max_scaler",
                                                                                           "label_encoder"]
    batch = linked.get_batch_data()
    assert "fraud" not in batch.columns and len(batch) == 200
    # batch data is transformed with the training split's statistics, not its own
    stats = linked.transformation_functions[0].transformation_statistics["amount"]
    raw = fg.read()["amount"].sort_values().reset_index(drop=True)
    expected = (raw - stats["min"]) / (stats["max"] - stats["min"])
    assert np.allclose(np.sort(batch["min_max_scaler_amount_"].to_numpy()), expected.to_numpy())


def test_a_training_dataset_version_returns_the_same_rows_after_new_commits(project):
    fs, fg, fv = _view(project, transformation_functions=[standard_scaler("amount")])
    X_train, X_test, y_train, y_test = fv.train_test_split(test_size=0.25, seed=3)
    version = fv.get_training_datasets()[-1]["version"]
    more = _tables(rows=50, seed=9)[1]
    more["ts"] = [T0 + dt.timedelta(days=30, minutes=i) for i in range(50)]
    fg.insert(more)                                           # new rows after the version was built
    fg.insert(pd.DataFrame({"CustomerID": [int(fg.read()["customerid"][0])], "ts": [fg.read()["ts"][0]],
                            "amount": [1e6], "fraud": [1]}))  # and an update of a row it read
    again = fs.get_feature_view("fraud", 1).get_train_test_split(version)
    for before, after in zip((X_train, X_test, y_train, y_test), again):
        pd.testing.assert_frame_equal(before.reset_index(drop=True), after.reset_index(drop=True))
    fresh = fv.train_test_split(test_size=0.25, seed=3)
    assert len(fresh[0]) + len(fresh[1]) == 250  # a new version reads the new commits


def test_splits_by_time_and_three_ways(project):
    fs, fg, fv = _view(project)
    middle = T0 + dt.timedelta(minutes=5000)
    X_train, X_test, y_train, y_test = fv.train_test_split(train_start=T0 - dt.timedelta(days=1), train_end=middle,
                                                           test_start=middle, test_end=T0 + dt.timedelta(days=10),
                                                           event_time=True)
    assert X_train["ts"].max() < middle <= X_test["ts"].min() and len(X_train) + len(X_test) == 200
    parts = fv.train_validation_test_split(validation_size=0.2, test_size=0.2, seed=1)
    assert len(parts) == 6 and sum(len(p) for p in parts[:3]) == 200
    with pytest.raises(FeatureStoreError, match="either by size"):
        fv.train_test_split(test_size=0.2, test_start=middle)
    with pytest.raises(FeatureStoreError, match="test_size=1.5"):
        fv.train_test_split(test_size=1.5)


def test_one_hot_and_user_functions_with_statistics(project):
    @udf(float, drop=["amount"])
    def centred(amount, statistics=None):
        return amount - statistics.amount.mean

    fs, fg, fv = _view(project, transformation_functions=[one_hot_encoder("country"), centred("amount")])
    X, y = fv.training_data()
    hot = [c for c in X.columns if c.startswith("one_hot_encoder_country_")]
    assert hot == ["one_hot_encoder_country_0", "one_hot_encoder_country_1", "one_hot_encoder_country_2"]
    assert (X[hot].sum(axis=1) == 1).all()
    assert X["centred_amount_"].mean() == pytest.approx(0.0, abs=1e-9)


def test_views_refuse_what_they_cannot_give(project):
    fs, fg, fv = _view(project)
    with pytest.raises(FeatureStoreError, match="label 'nope' is not among the query's features"):
        fs.create_feature_view("bad", query=fg.select_all(), labels=["nope"])
    with pytest.raises(FeatureStoreError, match="transforms 'missing'"):
        fs.create_feature_view("bad", query=fg.select_all(), transformation_functions=[min_max_scaler("missing")])
    with pytest.raises(FeatureStoreError, match="no training dataset version 9"):
        fv.get_train_test_split(9)
    with pytest.raises(FeatureStoreError, match="no feature view 'other'"):
        fs.get_feature_view("other")
    with pytest.raises(FeatureStoreError, match="'orders_1' is not online enabled"):
        fv.get_feature_vector({"customerid": 1})


def test_a_created_training_dataset_is_a_dataset_every_reader_reads(project):
    from hopsml.data import reader

    fs, fg, fv = _view(project, transformation_functions=[min_max_scaler("amount"), label_encoder("country")])
    version, job = fv.create_train_test_split(test_size=0.25, seed=5, shards=2)
    assert job is None
    name = fv.training_dataset_name(version)
    assert name == f"fraud_1_td{version}"
    X_train, X_test, y_train, y_test = fv.get_train_test_split(version)
    train = reader(name, rank=0, world_size=1, split="train", shuffle=False, batch_size=1000)
    batch = next(iter(train))
    assert sorted(batch) == ["features", "label"]
    features = X_train.copy()   # the selected key and time are features too (time as epoch milliseconds)
    features["ts"] = pd.to_datetime(features["ts"], utc=True).dt.tz_convert(None).astype("datetime64[ms]") \
        .astype("int64")
    assert batch["features"].shape == (len(X_train), features.shape[1])   # all numeric after the transforms
    assert np.allclose(batch["features"], features.to_numpy(dtype=np.float32))
    assert batch["label"].tolist() == y_train["fraud"].tolist()
    halves = [next(iter(reader(name, rank=r, world_size=2, split="test", shuffle=False, batch_size=1000)))
              for r in range(2)]
    assert sum(len(h["label"]) for h in halves) == len(X_test)  # two shards: one per rank
    fv.train_test_split(test_size=0.2, seed=1)   # a version that is not written out
    with pytest.raises(FeatureStoreError, match="was not written out"):
        fv.training_dataset_name(version + 1)


def test_hsml_schemas_and_hsfs_names_as_hopsworks_tutorials_import_them(project, tmp_path):
    from hopsml.hopsworks.hsfs.feature import Feature
    from hopsml.hopsworks.hsml.model_schema import ModelSchema
    from hopsml.hopsworks.hsml.schema import Schema

    fs, fg, fv = _view(project, transformation_functions=[min_max_scaler("amount")])
    X_train, X_test, y_train, y_test = fv.train_test_split(test_size=0.2, seed=1)
    schema = ModelSchema(input_schema=Schema(X_train), output_schema=Schema(y_train))
    assert schema.to_dict()["input_schema"]["columnar_schema"][0] == {"name": str(X_train.columns[0]),
                                                                      "type": str(X_train.dtypes.iloc[0])}
    assert Schema(np.zeros((3, 2), dtype=np.float32)).to_dict() == {"tensor_schema": {"type": "float32",
                                                                                    "shape": [3, 2]}}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.txt").write_text("1")
    model = project.get_model_registry().sklearn.create_model("fraud", model_schema=schema, feature_view=fv)
    model.save(str(tmp_path / "m"))
    again = project.get_model_registry().get_model("fraud", model.version)
    assert again.model_schema["output_schema"] == {"columnar_schema": [{"name": "fraud", "type": "int64"}]}
    function = fv.transformation_functions[0]
    assert (function.hopsworks_udf.function_name, function.hopsworks_udf.transformation_features,
            function.output_column_names) == ("min_max_scaler", ["amount"], ["min_max_scaler_amount_"])
    assert isinstance(fg.amount, Feature)


def test_batch_scoring_exposes_the_fitted_functions_as_hsfs_does(project):
    """The churn tutorial's batch inference reads `fv._batch_scoring_server.model_dependent_transformation_functions`
    after init_batch_scoring, to turn scaled batch columns back into their values."""
    fs = project.get_feature_store()
    orders = fs.create_feature_group("orders", primary_key=["customerid"], event_time="ts")
    orders.insert(_tables()[1])
    fv = fs.create_feature_view("spend", query=orders.select(["amount", "customerid", "ts"]),
                                transformation_functions=[min_max_scaler("amount")])
    with pytest.raises(FeatureStoreError, match="init_batch_scoring"):
        _ = fv._batch_scoring_server
    version, _ = fv.create_training_data()
    fv.init_batch_scoring(version)
    (function,) = fv._batch_scoring_server.model_dependent_transformation_functions
    hudf = function.hopsworks_udf
    assert hudf.function_name == "min_max_scaler" and hudf.transformation_features == ["amount"]
    stats = hudf.transformation_statistics
    batch = fv.get_batch_data()
    restored = batch[hudf.output_column_names[0]].map(lambda x: x * (stats.feature.max - stats.feature.min)
                                                       + stats.feature.min)
    raw = orders.read().sort_values(["customerid", "ts"])["amount"].tolist()
    assert sorted(restored.round(6).tolist()) == sorted(pd.Series(raw).round(6).tolist())


def test_a_joined_key_the_left_side_leaves_out_is_a_feature_of_the_training_data(project, caplog):
    """nyc_taxi_fares' training pipeline: fares.select([...]).join(rides.select_except([...]), on=['ride_id'])
    selects ride_id through the joined group only; it is in X (the program drops it itself). And select_except as
    hsfs has it: one name as a string, and a name the group lacks leaves nothing out (logged)."""
    fs = project.get_feature_store()
    rides = fs.create_feature_group("rides", primary_key=["ride_id"], event_time="pickup")
    rides.insert(pd.DataFrame({"ride_id": [1, 2, 3, 4], "pickup": [T0] * 4, "taxi_id": [5, 6, 7, 8],
                               "passengers": [1, 2, 3, 4]}))
    fares = fs.create_feature_group("fares", primary_key=["ride_id"], event_time="ts")
    fares.insert(pd.DataFrame({"ride_id": [1, 2, 3, 4], "ts": [T0 + dt.timedelta(minutes=1)] * 4,
                               "total_fare": [1.0, 2.0, 3.0, 4.0], "tolls": [0.0, 1.0, 0.0, 1.0]}))
    query = fares.select(["total_fare", "tolls"]).join(rides.select_except(["taxi_id", "pickup"]), on=["ride_id"])
    fv = fs.create_feature_view("fares_fv", query=query, labels=["total_fare"])
    x_train, x_test, y_train, _ = fv.train_test_split(test_size=0.5, seed=1)
    assert list(x_train.columns) == ["tolls", "ride_id", "passengers"]
    assert sorted([*x_train["ride_id"], *x_test["ride_id"]]) == [1, 2, 3, 4]
    assert (x_train["passengers"] == x_train["ride_id"]).all()   # each ride's own row
    assert rides.select_except("taxi_id").features == ("ride_id", "pickup", "passengers")
    with caplog.at_level("WARNING", logger="hopsml.featurestore.group"):
        assert rides.select_except(["no_such"]).features == ("ride_id", "pickup", "taxi_id", "passengers")
    assert "names no feature" in caplog.text


def test_select_takes_one_name_and_splits_take_hsfs_date_strings(project):
    """fraud_online's training pipeline: fg.select('cc_num') and train_test_split(train_end="2022/01/01")."""
    fs = project.get_feature_store()
    orders = fs.create_feature_group("orders", primary_key=["customerid"], event_time="ts")
    orders.insert(_tables()[1])
    assert orders.select("amount").features == ("amount",)
    fv = fs.create_feature_view("by_time", query=orders.select(["amount", "ts"]))
    middle = (T0 + dt.timedelta(days=3)).strftime("%Y/%m/%d")
    x_train, x_test, _, _ = fv.train_test_split(train_start=(T0 - dt.timedelta(days=1)).strftime("%Y/%m/%d"),
                                                train_end=middle, test_start=middle,
                                                test_end=(T0 + dt.timedelta(days=30)).strftime("%Y/%m/%d"))
    cut = pd.Timestamp(T0 + dt.timedelta(days=3)).normalize()
    assert len(x_train) + len(x_test) == len(_tables()[1]) and (pd.to_datetime(x_train["ts"], utc=True) < cut).all()


def test_a_model_saved_with_its_view_records_the_version_the_view_gave_and_serves_from_it(project, tmp_path,
                                                                                       monkeypatch):
    """As hsml: create_model(feature_view=fv) without training_dataset_version takes the version fv made or read
    last; get_feature_view(online=True), or inside a deployment, is set up for feature vectors."""
    fs = project.get_feature_store()
    orders = fs.create_feature_group("orders", primary_key=["customerid"], event_time="ts", online_enabled=True)
    orders.insert(_tables()[1])
    fv = fs.create_feature_view("spend", query=orders.select(["customerid", "amount"]),
                                transformation_functions=[min_max_scaler("amount")])
    fv.train_test_split(test_size=0.2)
    fv.train_test_split(test_size=0.3)
    fv.get_train_test_split(1)   # read last
    assert fv.get_last_accessed_training_dataset() == 1
    (tmp_path / "m.pkl").write_bytes(b"model")
    model = project.get_model_registry().python.create_model("m", feature_view=fv).save(str(tmp_path / "m.pkl"))
    assert model.training_dataset_version == 1
    saved = project.get_model_registry().get_model("m", 1)
    batch = saved.get_feature_view()
    assert batch._batch_scoring_server.training_dataset_version == 1 and batch._serving is None
    online = saved.get_feature_view(online=True)
    assert online._serving == 1
    assert online.get_feature_vector({"customerid": 3})[0] == 3
    monkeypatch.setenv("DEPLOYMENT_NAME", "spend-serving")
    served = saved.get_feature_view()
    assert served._serving == 1
    assert served.get_feature_vector({"customerid": 3}) == online.get_feature_vector({"customerid": 3})


def test_a_split_that_leaves_the_training_split_empty_says_so(project):
    """Six rows split at random can leave no training row (each row draws its split): the error says that, not
    that a scaler's values were not numeric."""
    fs = project.get_feature_store()
    orders = fs.create_feature_group("orders", primary_key=["customerid"], event_time="ts")
    orders.insert(_tables(rows=6)[1])
    fv = fs.create_feature_view("tiny", query=orders.select(["amount"]),
                                transformation_functions=[min_max_scaler("amount")])
    seed = next(s for s in range(1000)
                if (np.random.default_rng(s).random(6) < 0.9).all())   # every row drawn into the test split
    with pytest.raises(FeatureStoreError, match="left no rows in the training split"):
        fv.train_test_split(test_size=0.9, seed=seed)
