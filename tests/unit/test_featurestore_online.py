"""The online store, on both stores (embedded SQLite, and a real MariaDB server): online-enabled groups keep the
newest row per key in the same insert (a backfill never overwrites a newer value), feature vectors are the
training features of a key with the training statistics' transforms, an online write that fails fails the insert
saying what each side holds, `hopsml fs sync` repairs, and the consistency check finds no mismatch after inserts,
backfills, upserts and repairs, and finds the ones made behind the store's back. The serving path built on plain
values gives the pandas path's values and types, reads its training dataset record once per version, and keeps
up with new columns, values written by another connection and a table changed behind its back."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import vectors
from hopsml.featurestore.online import table_name
from hopsml.featurestore.store import FeatureStore
from hopsml.hopsworks.hsfs.builtin_transformations import label_encoder, min_max_scaler

T0 = dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc)


def at(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.slow)])
def fs(request, tmp_path):
    online = request.getfixturevalue("mariadb_url") if request.param == "mariadb" else ""
    store = FeatureStore(config.load(environ={}, root=str(tmp_path / "root"), project=f"online{tmp_path.name[-6:]}",
                                     online_store=online))
    yield store
    store.online().close()


def _profiles(fs, **kwargs):
    group = fs.create_feature_group("profiles", primary_key=["customer"], event_time="ts", online_enabled=True,
                                    **kwargs)
    group.insert(pd.DataFrame({"customer": [1, 1, 2, 3], "ts": [at(0), at(5), at(1), at(2)],
                               "country": ["SE", "DE", "FR", "SE"], "limit": [100.0, 150.0, 80.0, 120.0]}))
    return group


def _view(fs, profiles, keyed: bool = False):
    """Orders joined with profiles; `keyed`: the query selects the orders' key and event time (features then)."""
    orders = fs.create_feature_group("orders", primary_key=["order_id"], event_time="ts")
    orders.insert(pd.DataFrame({"order_id": range(6), "customer": [1, 2, 3, 1, 2, 3],
                                "ts": [at(h) for h in (6, 6, 6, 7, 7, 7)],
                                "amount": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0], "fraud": [0, 1, 0, 1, 0, 0]}))
    selected = ["order_id", "ts", "amount", "fraud"] if keyed else ["amount", "fraud"]
    query = orders.select(selected).join(profiles.select(["country", "limit"]), on=["customer"])
    view = fs.create_feature_view("fraud", query=query, labels=["fraud"],
                                  transformation_functions=[min_max_scaler("limit"), label_encoder("country")])
    view.train_test_split(test_size=0.3, seed=1)
    return orders, view


def test_the_newest_row_per_key_is_online_and_a_backfill_never_overwrites_it(fs):
    profiles = _profiles(fs)
    online = fs.online()
    schema = profiles.table.schema()
    rows = online.read(profiles, [(1,), (2,), (3,), (9,)], schema)
    assert sorted(rows) == [(1,), (2,), (3,)]                       # an unknown key has no row
    assert rows[(1,)]["country"] == "DE" and rows[(1,)]["ts"] == at(5)   # the later of the batch's two rows
    profiles.insert(pd.DataFrame({"customer": [1, 2], "ts": [at(3), at(9)], "country": ["NO", "IT"],
                                  "limit": [1.0, 2.0]}))           # 1: a backfill (older); 2: newer
    rows = online.read(profiles, [(1,), (2,)], schema)
    assert (rows[(1,)]["country"], rows[(2,)]["country"]) == ("DE", "IT")
    assert len(profiles.read()) == 6                                # the offline side keeps all history
    profiles.insert(pd.DataFrame({"customer": [1], "ts": [at(5)], "country": ["DK"], "limit": [155.0]}))
    assert online.read(profiles, [(1,)], schema)[(1,)]["country"] == "DK"   # the same (key, time): an update
    assert online.count(profiles) == 3


def test_feature_vectors_are_the_training_features_with_the_training_transforms(fs):
    profiles = _profiles(fs)
    orders, view = _view(fs, profiles, keyed=True)
    X_train, X_test, _, _ = view.get_train_test_split(1)
    view.init_serving(1)
    assert view.serving_keys == ["order_id", "customer"]
    # the query selects the label group's key and event time, so they are features of the vector, as hsfs has
    # them: the key's value is the entry's, the time (of a group that is not online) is passed in
    entry, passed = {"order_id": 7, "customer": 1}, {"amount": 25.0, "ts": at(8)}
    vector = view.get_feature_vector(entry, passed_features=passed, return_type="pandas")
    assert list(vector.columns) == list(X_train.columns)            # what the model was trained on, in order
    stats = view.serving_functions()[0].transformation_statistics["limit"]
    assert vector["min_max_scaler_limit_"].iloc[0] == pytest.approx((150.0 - stats["min"]) / (stats["max"] -
                                                                                              stats["min"]))
    assert vector["amount"].iloc[0] == 25.0
    untransformed = view.get_feature_vector(entry, passed_features=passed, transform=False)
    assert untransformed == [7, at(8), 25.0, "DE", 150.0]           # 5 values: the key and time too
    several = view.get_feature_vectors([{"order_id": 1, "customer": 2}, {"order_id": 2, "customer": 3}],
                                       passed_features=[{"amount": 1.0, "ts": at(8)}, {"amount": 2.0, "ts": at(8)}],
                                       return_type="pandas")
    assert several.shape == (2, len(X_train.columns)) and several["order_id"].tolist() == [1, 2]
    with pytest.raises(FeatureStoreError, match=r"no online row for \{'customer': 9\} in feature group "
                                                r"'profiles_1'"):
        view.get_feature_vector({"order_id": 1, "customer": 9}, passed_features=passed)
    assert view.get_feature_vector({"order_id": 1, "customer": 9}, passed_features=passed, allow_missing=True,
                                   transform=False) == [1, at(8), 25.0, None, None]
    with pytest.raises(FeatureStoreError, match="'orders_1' is not online enabled, so its features \\(amount, ts\\)"):
        view.get_feature_vector({"order_id": 1, "customer": 1})
    with pytest.raises(FeatureStoreError, match="has no 'customer'"):
        view.get_feature_vector({"client": 1}, passed_features=passed)
    # a vector as a list, a list of them, a dict or a frame, transformed as the vector path transforms it
    assert view.transform(untransformed) == view.get_feature_vector(entry, passed_features=passed)
    transformed = view.get_feature_vector(entry, passed_features=passed)
    assert view.transform([untransformed, untransformed]) == [transformed, transformed]
    as_dict = view.transform(dict(zip(vectors.columns(view), untransformed)))
    assert list(as_dict) == list(X_train.columns) and as_dict["amount"] == 25.0
    pd.testing.assert_frame_equal(view.transform(pd.DataFrame([untransformed], columns=vectors.columns(view))),
                                  vector)
    with pytest.raises(FeatureStoreError, match="a feature vector of 3 values for 5 features"):
        view.transform([25.0, "DE", 150.0])


def test_the_check_finds_no_mismatch_after_each_write_and_finds_a_change_behind_the_stores_back(fs):
    profiles = _profiles(fs)
    orders, view = _view(fs, profiles)
    assert vectors.check(view, seed=1)["mismatches"] == 0
    profiles.insert(pd.DataFrame({"customer": [1, 2], "ts": [at(3), at(9)], "country": ["NO", "IT"],
                                  "limit": [1.0, 2.0]}))            # a backfill and a newer row
    assert vectors.check(view, seed=1)["mismatches"] == 0
    profiles.insert(pd.DataFrame({"customer": [3], "ts": [at(2)], "country": ["ES"], "limit": [121.0]}))  # upsert
    assert vectors.check(view, seed=1)["mismatches"] == 0
    online = fs.online()
    mark = "%s" if online.dialect == "mysql" else "?"
    online.execute(f"UPDATE {online._q(table_name(profiles))} SET {online._q('limit')} = 999 WHERE "
                   f"{online._q('customer')} = {mark}", [3])
    report = vectors.check(view, seed=1)
    assert report["features"]["limit"] == 2 and report["features"]["country"] == 0   # two orders of customer 3
    assert report["transformed"]["min_max_scaler_limit_"] == 2
    assert {e["online"] for e in report["examples"] if not e.get("transformed")} == {999.0}
    assert profiles.sync_online() == 3
    assert vectors.check(view, seed=1)["mismatches"] == 0


def test_a_failed_online_write_is_recorded_not_raised_and_sync_repairs(tmp_path, capsys, caplog):
    pytest.importorskip("pymysql")   # a MySQL store nothing answers on
    root = str(tmp_path / "root")
    down = FeatureStore(config.load(environ={}, root=root, project="p",
                                    online_store="mysql://hopsml:Pa55word@127.0.0.1:1/none"))
    group = down.create_feature_group("profiles", primary_key=["customer"], event_time="ts", online_enabled=True)
    # the offline commit landed, so the insert does not fail (a retry would insert again): logged and recorded
    group.insert(pd.DataFrame({"customer": [1, 2], "ts": [at(0), at(1)], "country": ["SE", "DE"],
                               "limit": [1.0, 2.0]}))
    problems = down.after_commit_problems(group)
    assert [(p["commit"], p["step"]) for p in problems] == [(0, "the online write")]
    text = problems[0]["error"]
    assert "the offline table holds the batch (commit 0)" in text and "hopsml fs sync profiles 1" in text
    assert "Pa55word" not in text and "mysql://127.0.0.1:1/none" in text
    assert "commit 0 landed, but the online write failed" in caplog.text and "Pa55word" not in caplog.text
    assert len(group.read()) == 2

    from hopsml import cli

    assert cli.main(["--root", root, "--project", "p", "fs", "sync", "profiles"]) == 0
    assert "2 rows, the newest per key" in capsys.readouterr().out
    here = FeatureStore(config.load(environ={}, root=root, project="p"))
    assert here.online().count(here.get_feature_group("profiles")) == 2


def test_the_cli_prints_vectors_and_checks(tmp_path, capsys):
    from hopsml import cli

    root = str(tmp_path / "root")
    fs = FeatureStore(config.load(environ={}, root=root, project="p"))
    profiles = fs.create_feature_group("profiles", primary_key=["customer"], event_time="ts", online_enabled=True)
    profiles.insert(pd.DataFrame({"customer": [1, 2], "ts": [at(0), at(1)], "limit": [1.0, 2.0]}))
    fs.create_feature_view("limits", query=profiles.select(["limit"]))
    args = ["--root", root, "--project", "p", "fs"]
    assert cli.main([*args, "vector", "limits", "customer=2"]) == 0
    assert "limit" in capsys.readouterr().out
    assert cli.main([*args, "check-online", "limits", "--seed", "3"]) == 0
    assert "2 keys" in capsys.readouterr().out
    fs.online().execute('UPDATE "p__profiles_1" SET "limit" = 5 WHERE "customer" = 1')
    assert cli.main([*args, "check-online", "limits"]) != 0
    assert "1 mismatches" in capsys.readouterr().err


def test_the_check_finds_a_transformation_skew_the_features_do_not_show(fs, capsys, monkeypatch):
    """The transformed comparison rebuilds the offline side from the training dataset's recorded statistics, apart
    from the serving's path: a serving whose statistics differ (here: it serves with version 1's, the reference is
    version 2, fitted after new rows changed the scale) is found though every raw feature agrees."""
    profiles = _profiles(fs)
    orders, view = _view(fs, profiles)                  # training dataset version 1
    assert vectors.check(view, seed=1)["mismatches"] == 0
    orders.insert(pd.DataFrame({"order_id": [6, 7], "customer": [1, 2], "ts": [at(8), at(8)], "amount": [1.0, 2.0],
                                "fraud": [0, 1]}))
    profiles.insert(pd.DataFrame({"customer": [4], "ts": [at(1)], "country": ["IS"], "limit": [1000.0]}))
    orders.insert(pd.DataFrame({"order_id": [8], "customer": [4], "ts": [at(9)], "amount": [3.0], "fraud": [0]}))
    view.training_data()                                # version 2: limit's min and max are others
    view.init_serving(2)
    before = view.serving_functions()[0].transformation_statistics["limit"]
    view.init_serving(1)                                # the online side keeps version 1's statistics
    assert view.serving_functions()[0].transformation_statistics["limit"] != before
    report = vectors.check(view, seed=1, training_dataset_version=2)
    assert sum(report["features"].values()) == 0        # the raw features agree
    assert report["training_dataset_version"] == 2 and report["transformed"]["min_max_scaler_limit_"] > 0
    assert report["transformed"]["label_encoder_country_"] > 0      # 'IS' is a category version 1 never saw
    assert any(e.get("transformed") for e in report["examples"])
    assert vectors.check(view, seed=1, training_dataset_version=1)["mismatches"] == 0   # served as recorded
    view.init_serving(2)
    assert vectors.check(view, seed=1)["mismatches"] == 0

    from hopsml import cli

    monkeypatch.setenv("HOPSML_ONLINE_STORE", fs.settings.online_store)   # the command's store is the test's
    args = ["--root", str(fs.settings.root), "--project", fs.project, "fs", "check-online", "fraud", "--seed", "1"]
    assert cli.main([*args, "--serving-version", "1"]) != 0
    assert "transforms with other statistics than training dataset version 2" in capsys.readouterr().err
    assert cli.main(args) == 0


# --- the serving path: plain values give what the pandas frame gives, and what it keeps stays current -------------
def _traits(fs):
    """A group whose columns have every kind a vector types: floats, integers, text, booleans, and missing values."""
    traits = fs.create_feature_group("traits", primary_key=["customer"], event_time="ts", online_enabled=True)
    traits.insert(pd.DataFrame({"customer": [1, 2, 3, 4], "ts": [at(0)] * 4, "score": [0.5, None, 2.5, -1.0],
                                "visits": [3, 10, 7, 0], "tier": ["gold", "silver", None, "gold"],
                                "vip": [True, False, True, False], "flat": [1.0] * 4}))
    orders = fs.create_feature_group("orders", primary_key=["order_id"], event_time="ts")
    orders.insert(pd.DataFrame({"order_id": range(8), "customer": [1, 2, 3, 4] * 2, "ts": [at(h) for h in range(1, 9)],
                                "amount": [5.0, 7.5, 1.0, 20.0, 3.0, 9.0, 2.5, 4.0], "fraud": [0, 1] * 4}))
    return traits, orders


def _reference(view, entries, passed, allow_missing, transform, return_type, single):
    """The pandas path the plain-value one stands in for: the frame, the functions on it, _vector_as, the log."""
    from hopsml import request_notes
    from hopsml.featurestore.transformations import apply_all
    from hopsml.featurestore.view import _vector_as

    frame = vectors.vectors(view, entries, passed, allow_missing)
    if transform:
        frame = apply_all(frame, view.serving_functions())
    numbers = frame.astype({c: "int64" for c in frame.columns if frame[c].dtype == bool})
    logged = numbers.astype(object).where(numbers.notna(), None).values.tolist() if transform else None
    with request_notes.noting():
        answer = _vector_as(frame, return_type, single)
    return answer, logged


def _identical(a, b):
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and all(
            _identical(x, y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
    if isinstance(a, list) or isinstance(b, list):
        return type(a) is type(b) and len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("functions", ["scalers", "encoders"])
def test_vectors_on_plain_values_are_the_pandas_paths_values_and_types(fs, functions):
    from hopsml import request_notes
    from hopsml.hopsworks.hsfs.builtin_transformations import one_hot_encoder, robust_scaler, standard_scaler

    traits, orders = _traits(fs)
    query = orders.select(["amount", "fraud"]).join(   # no key or time selected: they are not in the vectors
        traits.select(["score", "visits", "tier", "vip", "flat"]), on=["customer"])
    chosen = ([standard_scaler("score"), min_max_scaler("visits"), label_encoder("tier"), robust_scaler("amount"),
               min_max_scaler("flat")]   # no spread: x / 0 as IEEE has it, NaN missing
              if functions == "scalers" else
              [one_hot_encoder("tier"), label_encoder("vip"), label_encoder("visits"), min_max_scaler("score")])
    view = fs.create_feature_view(f"mixed_{functions}", query=query, labels=["fraud"],
                                  transformation_functions=chosen)
    view.train_test_split(test_size=0.25, seed=3)
    view.init_serving(1)
    cases = [
        ([{"customer": 1}], [{"amount": 5.0}]),
        ([{"customer": 2}], [{"amount": 4}]),                                  # an integer into a float feature
        ([{"customer": 3}], [{"amount": None}]),                               # missing values, stored and passed
        ([{"customer": 4}], [{"amount": 1.5, "tier": "platinum"}]),            # a category training never saw
        ([{"customer": c} for c in (1, 2, 3, 4, 1)], [{"amount": float(c)} for c in range(5)]),
        ([{"customer": 1}, {"customer": 9}], [{"amount": 1.0}, {"amount": 2.0}]),   # allow_missing: ints turn float
        ([{"customer": 2}, {"customer": 4}], [{"amount": 1.0, "visits": None}, {"amount": 2.0}]),
        ([{"customer": 1}, {"customer": 3}], [{"amount": 1.0, "flat": 2.0}, {"amount": 2.0, "flat": -3}]),
    ]
    for entries, passed in cases:
        for transform in (True, False):
            for return_type in ("list", "numpy"):
                for single in ((True, False) if len(entries) == 1 else (False,)):
                    missing = any(e["customer"] == 9 for e in entries)
                    want, logged = _reference(view, entries, passed, missing, transform, return_type, single)
                    with request_notes.noting() as note:
                        got = (view.get_feature_vector(entries[0], passed[0], return_type, missing, transform)
                               if single else
                               view.get_feature_vectors(entries, passed, return_type, missing, transform))
                    assert _identical(got, want), (entries, passed, transform, return_type, got, want)
                    if transform:
                        assert _identical(note["inputs"]["instances"], logged), (entries, passed, return_type)
    plan = vectors.Plan(view)   # the common cases are answered without pandas
    _, steps = view._serving_steps()
    assert steps is not None
    for entries, passed in cases[:2]:
        assert vectors.shaped(plan.wanted, plan.fetch(entries, passed, False), steps, "list", True, True) is not None


def test_vectors_keep_what_pandas_alone_types_on_the_pandas_path(fs):
    from hopsml.hopsworks.hsfs import udf

    @udf(float)
    def doubled(score):
        return score * 2

    traits, _ = _traits(fs)
    traits.insert(pd.DataFrame({"customer": [5], "ts": [at(1)], "score": [1.0], "visits": [1], "tier": ["gold"],
                                "vip": [True], "seen": [at(3)]}))   # a new column: a time
    timed = fs.create_feature_view("timed", query=traits.select(["score", "seen"]))
    assert timed.get_feature_vector({"customer": 5}) == [1.0, pd.Timestamp(at(3))]
    assert timed.get_feature_vector({"customer": 1}) == [0.5, None]
    own = fs.create_feature_view("own", query=traits.select(["score", "visits"]),
                                 transformation_functions=[doubled("score")])
    own.training_data()
    assert own.get_feature_vector({"customer": 3}) == [2.5, 7, 5.0]   # a udf keeps its input unless it drops it
    assert _identical(own.get_feature_vectors([{"customer": 3}, {"customer": 4}], return_type="numpy"),
                      _reference(own, [{"customer": 3}, {"customer": 4}], None, False, True, "numpy", False)[0])


def test_a_serving_reads_its_training_dataset_record_once_and_takes_a_new_version(fs, monkeypatch):
    profiles = _profiles(fs)
    orders, view = _view(fs, profiles)
    reads = []
    original = fs.read_training_dataset
    monkeypatch.setattr(fs, "read_training_dataset", lambda v, n: reads.append(n) or original(v, n))
    view.init_serving(1)
    first = view.get_feature_vector({"customer": 1}, passed_features={"amount": 25.0})
    for _ in range(3):
        assert view.get_feature_vector({"customer": 1}, passed_features={"amount": 25.0}) == first
    assert reads == [1]                                                # not once per vector
    profiles.insert(pd.DataFrame({"customer": [4], "ts": [at(3)], "country": ["NO"], "limit": [1000.0]}))
    orders.insert(pd.DataFrame({"order_id": [6], "customer": [4], "ts": [at(8)], "amount": [1.0], "fraud": [1]}))
    view.train_test_split(test_size=0.3, seed=1)                       # version 2: the limits now reach 1000
    reads.clear()   # making version 2 reads its record too (its statistics and lineage are added to it)
    view.init_serving(2)
    second = view.get_feature_vector({"customer": 1}, passed_features={"amount": 25.0})
    stats = view.serving_functions()[0].transformation_statistics["limit"]
    assert stats["max"] == 1000.0 and reads == [2]
    assert second[1] == pytest.approx((150.0 - stats["min"]) / (stats["max"] - stats["min"])) != first[1]
    view.init_serving(1)
    assert view.get_feature_vector({"customer": 1}, passed_features={"amount": 25.0}) == first


def test_a_serving_sees_new_columns_new_values_and_tables_changed_behind_its_back(fs):
    from hopsml.featurestore.online import MySQLStore, SQLiteStore

    profiles = _profiles(fs)
    view = fs.create_feature_view("limits", query=profiles.select(["country", "limit"]))
    assert view.get_feature_vector({"customer": 1}) == ["DE", 150.0]
    profiles.insert(pd.DataFrame({"customer": [1, 4], "ts": [at(6), at(6)], "country": ["FI", "PL"],
                                  "limit": [160.0, 40.0], "segment": ["b2b", "b2c"]}))   # a new column
    assert view.get_feature_vector({"customer": 1}) == ["FI", 160.0]   # the same view, after the schema changed
    assert view.get_feature_vectors([{"customer": 4}, {"customer": 2}]) == [["PL", 40.0], ["FR", 80.0]]
    wider = fs.create_feature_view("limits", version=2, query=profiles.select(["country", "limit", "segment"]))
    assert wider.get_feature_vector({"customer": 4}) == ["PL", 40.0, "b2c"]
    assert wider.get_feature_vector({"customer": 2}) == ["FR", 80.0, None]   # stored before the column was
    online = fs.online()   # another process's connection: this store's readers hear nothing of what it does
    other = SQLiteStore(online.url, online.path) if online.dialect == "sqlite" else MySQLStore(online.url)
    table, mark = online._q(table_name(profiles)), "%s" if online.dialect == "mysql" else "?"
    try:
        other.execute(f"UPDATE {table} SET {online._q('limit')} = 5 WHERE {online._q('customer')} = {mark}", [1])
        assert view.get_feature_vector({"customer": 1}) == ["FI", 5.0]      # a new value, at once
        other.execute(f"ALTER TABLE {table} RENAME TO {online._q('moved')}")
        with pytest.raises(FeatureStoreError, match=r"no online row for \{'customer': 1\}"):
            view.get_feature_vector({"customer": 1})                     # the table is gone: no rows, no crash
        other.execute(f"ALTER TABLE {online._q('moved')} RENAME TO {table}")
        assert view.get_feature_vector({"customer": 1}) == ["FI", 5.0]
    finally:
        other.close()


def test_helper_columns_stay_out_of_training_and_vectors_and_are_served_on_request(fs):
    profiles = fs.create_feature_group("cards", primary_key=["customer"], event_time="ts", online_enabled=True)
    profiles.insert(pd.DataFrame({"customer": [1, 2], "ts": [at(0), at(1)], "expiry": ["2027-01", "2026-05"],
                                  "segment": ["a", "b"], "limit": [100.0, 80.0]}))
    orders = fs.create_feature_group("payments", primary_key=["order_id"], event_time="ts")
    orders.insert(pd.DataFrame({"order_id": range(4), "customer": [1, 2, 1, 2], "ts": [at(h) for h in (6, 6, 7, 7)],
                                "amount": [10.0, 20.0, 30.0, 40.0], "fraud": [0, 1, 0, 1]}))
    query = orders.select(["ts", "amount", "fraud"]).join(   # the event time selected, the key not
        profiles.select(["expiry", "segment", "limit"]), on=["customer"])
    view = fs.create_feature_view("pay", query=query, labels=["fraud"], inference_helper_columns=["expiry"],
                                  training_helper_columns=["segment"])
    view = fs.get_feature_view("pay", 1)                 # the roles are kept with the view
    assert (view.inference_helper_columns, view.training_helper_columns) == (["expiry"], ["segment"])
    # hsfs's columns: the selected features (the event time among them) with or without event_time=True, the
    # key the query does not select only with primary_key=True (or primary_keys=True), by its qualified name
    key = f"{fs.project}_payments_1_order_id"
    X, y = view.training_data()
    assert list(X.columns) == ["ts", "amount", "limit"] and list(y.columns) == ["fraud"]
    X, _ = view.get_training_data(1, training_helper_columns=True)
    assert list(X.columns) == ["ts", "amount", "segment", "limit"]
    X, _ = view.get_training_data(1, primary_key=True, event_time=True)
    assert list(X.columns) == ["ts", "amount", key, "limit"] and sorted(X[key]) == [0, 1, 2, 3]
    X_train, X_test, _, _ = view.train_test_split(test_size=0.5, seed=1, primary_keys=True)
    assert key in X_train.columns and key in X_test.columns
    assert list(view.get_batch_data().columns) == ["ts", "amount", "limit"]
    assert list(view.get_batch_data(event_time=True).columns) == ["ts", "amount", "limit"]
    assert list(view.get_batch_data(primary_key=True).columns) == ["ts", "amount", key, "limit"]
    assert list(view.get_batch_data(inference_helper_columns=True).columns) == ["ts", "amount", "expiry", "limit"]
    assert list(view.get_batch_data(inference_helpers=True).columns) == ["ts", "amount", "expiry", "limit"]
    assert list(view.get_batch_data(transformed=False).columns) == ["ts", "amount", "expiry", "limit"]
    view.init_serving(1)
    assert view.get_feature_vector({"customer": 2}, passed_features={"amount": 5.0, "ts": at(9)}) == [at(9), 5.0,
                                                                                                     80.0]
    assert view.get_inference_helper({"customer": 2}, return_type="dict") == {"expiry": "2026-05"}
    helpers = view.get_inference_helpers([{"customer": 1}, {"customer": 2}])
    assert helpers["expiry"].tolist() == ["2027-01", "2026-05"]
    with pytest.raises(FeatureStoreError, match=r"no online row for \{'customer': 7\}"):
        view.get_inference_helper({"customer": 7})
    with pytest.raises(FeatureStoreError, match="inference helper column 'nope' is not among the query's features"):
        fs.create_feature_view("bad", query=query, inference_helper_columns=["nope"])
    with pytest.raises(FeatureStoreError, match="'fraud' is a label"):
        fs.create_feature_view("bad", query=query, labels=["fraud"], training_helper_columns=["fraud"])
    _, plain = _view(fs, _profiles(fs))
    with pytest.raises(FeatureStoreError, match="has no inference helper columns"):
        plain.get_inference_helper({"customer": 1})


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["pymysql", "mysqlclient"])
def test_text_keys_differ_by_case_and_spaces_with_either_driver_and_deleting_drops_the_online_table(
        mariadb_url, tmp_path, driver):
    pytest.importorskip({"pymysql": "pymysql", "mysqlclient": "MySQLdb"}[driver])
    fs = FeatureStore(config.load(environ={}, root=str(tmp_path / "root"), project=f"drv{driver}",
                                  online_store=f"{mariadb_url}?driver={driver}"))
    _text_keys_then_delete(fs)
    fs.online().close()


def test_text_keys_differ_by_case_and_spaces_and_deleting_drops_the_online_table(fs):
    _text_keys_then_delete(fs)


def _text_keys_then_delete(fs):
    users = fs.create_feature_group("users", primary_key=["user"], event_time="ts", online_enabled=True)
    names = ["ann", "Ann", "ann ", "åsa"]
    users.insert(pd.DataFrame({"user": names, "ts": [at(0)] * 4, "score": [1.0, 2.0, 3.0, 4.0]}))
    view = fs.create_feature_view("scores", query=users.select(["user", "score"]))
    view.init_serving()
    assert view.get_feature_vectors([{"user": n} for n in names]) == [[n, float(i)] for i, n in enumerate(names, 1)]
    assert fs.online().count(users) == 4
    users.delete()
    assert fs.online().count(users) is None       # no table left behind in the online store


def test_a_group_reads_its_online_rows_and_inserts_into_one_store_only(fs):
    """hsfs's fg.read(online=True), insert(storage='online' | 'offline') and the SDK's None defaults."""
    profiles = _profiles(fs, foreign_key=None, hudi_precombine_key=None, parents=None)   # the SDK's defaults
    online = profiles.read(online=True).sort_values("customer").reset_index(drop=True)
    assert online.to_dict("list") == {"customer": [1, 2, 3], "ts": [at(5), at(1), at(2)],
                                      "country": ["DE", "FR", "SE"], "limit": [150.0, 80.0, 120.0]}
    assert profiles.select(["customer", "limit"]).read(online=True)["limit"].sort_values().tolist() == [80.0, 120.0,
                                                                                                         150.0]
    assert len(profiles.show(2, online=True)) == 2
    commits = len(profiles.table.commits())
    profiles.insert(pd.DataFrame({"customer": [4], "ts": [at(9)], "country": ["NO"], "limit": [9.0]}),
                    storage="online")
    assert len(profiles.table.commits()) == commits and 4 not in profiles.read()["customer"].tolist()
    assert 4 in profiles.read(online=True)["customer"].tolist()
    profiles.insert(pd.DataFrame({"customer": [5], "ts": [at(9)], "country": ["PL"], "limit": [5.0]}),
                    storage="offline")
    assert 5 in profiles.read()["customer"].tolist() and 5 not in profiles.read(online=True)["customer"].tolist()
    orders, view = _view(fs, profiles)
    with pytest.raises(FeatureStoreError, match="'orders_1' is not online enabled, so it has no online rows"):
        orders.read(online=True)
    with pytest.raises(FeatureStoreError, match="a query with joins, filters or as_of is read offline"):
        view.query.read(online=True)
    with pytest.raises(FeatureStoreError, match="the online store holds only the newest row per key"):
        profiles.read(wallclock_time=at(1), online=True)
    with pytest.raises(FeatureStoreError, match="stream=True: hopsml has no stream feature groups"):
        fs.create_feature_group("more", primary_key=["a"], foreign_key=None, stream=True)   # None passes, True not
