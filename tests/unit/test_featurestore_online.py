"""The online store, on both stores (embedded SQLite, and a real MariaDB server): online-enabled groups keep the
newest row per key in the same insert (a backfill never overwrites a newer value), feature vectors are the
training features of a key with the training statistics' transforms, an online write that fails fails the insert
saying what each side holds, `hopsml fs sync` repairs, and the consistency check finds no mismatch after inserts,
backfills, upserts and repairs, and finds the ones made behind the store's back."""

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


@pytest.fixture(scope="module")
def mariadb_url(tmp_path_factory):
    from mariadb import mariadb_server

    with mariadb_server(tmp_path_factory.mktemp("mariadb")) as url:
        yield url


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


def _view(fs, profiles):
    orders = fs.create_feature_group("orders", primary_key=["order_id"], event_time="ts")
    orders.insert(pd.DataFrame({"order_id": range(6), "customer": [1, 2, 3, 1, 2, 3],
                                "ts": [at(h) for h in (6, 6, 6, 7, 7, 7)],
                                "amount": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0], "fraud": [0, 1, 0, 1, 0, 0]}))
    query = orders.select(["order_id", "ts", "amount", "fraud"]).join(profiles.select(["country", "limit"]),
                                                                      on=["customer"])
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
    orders, view = _view(fs, profiles)
    X_train, X_test, _, _ = view.get_train_test_split(1)
    view.init_serving(1)
    assert view.serving_keys == ["order_id", "customer"]
    vector = view.get_feature_vector({"customer": 1}, passed_features={"amount": 25.0}, return_type="pandas")
    assert list(vector.columns) == list(X_train.columns)            # what the model was trained on, in order
    stats = view.serving_functions()[0].transformation_statistics["limit"]
    assert vector["min_max_scaler_limit_"].iloc[0] == pytest.approx((150.0 - stats["min"]) / (stats["max"] -
                                                                                              stats["min"]))
    assert vector["amount"].iloc[0] == 25.0
    untransformed = view.get_feature_vector({"customer": 1}, passed_features={"amount": 25.0}, transform=False)
    assert untransformed == [25.0, "DE", 150.0]
    several = view.get_feature_vectors([{"customer": 2}, {"customer": 3}], passed_features=[{"amount": 1.0},
                                                                                           {"amount": 2.0}],
                                       return_type="numpy")
    assert several.shape == (2, len(X_train.columns))
    with pytest.raises(FeatureStoreError, match=r"no online row for \{'customer': 9\} in feature group "
                                                r"'profiles_1'"):
        view.get_feature_vector({"customer": 9}, passed_features={"amount": 1.0})
    assert view.get_feature_vector({"customer": 9}, passed_features={"amount": 1.0}, allow_missing=True,
                                   transform=False) == [1.0, None, None]
    with pytest.raises(FeatureStoreError, match="'orders_1' is not online enabled, so its features \\(amount\\)"):
        view.get_feature_vector({"customer": 1})
    with pytest.raises(FeatureStoreError, match="has no 'customer'"):
        view.get_feature_vector({"client": 1}, passed_features={"amount": 1.0})


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
    assert {e["online"] for e in report["examples"]} == {999.0}
    assert profiles.sync_online() == 3
    assert vectors.check(view, seed=1)["mismatches"] == 0


def test_a_failed_online_write_fails_the_insert_and_sync_repairs(tmp_path, capsys):
    pytest.importorskip("pymysql")   # a MySQL store nothing answers on
    root = str(tmp_path / "root")
    down = FeatureStore(config.load(environ={}, root=root, project="p",
                                    online_store="mysql://hopsml:Pa55word@127.0.0.1:1/none"))
    group = down.create_feature_group("profiles", primary_key=["customer"], event_time="ts", online_enabled=True)
    with pytest.raises(FeatureStoreError) as failed:
        group.insert(pd.DataFrame({"customer": [1, 2], "ts": [at(0), at(1)], "country": ["SE", "DE"],
                                   "limit": [1.0, 2.0]}))
    text = str(failed.value)
    assert "the offline table holds the batch (commit 0)" in text and "hopsml fs sync profiles 1" in text
    assert "Pa55word" not in text and "mysql://127.0.0.1:1/none" in text
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
