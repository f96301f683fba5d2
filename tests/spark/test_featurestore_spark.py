"""The Spark engine gives the embedded engine's answer: the same point-in-time training rows on random data
(both checked against a brute-force oracle in tests/unit), groups read as Spark DataFrames from their Delta
tables' Parquet files (no Delta jars), and Spark DataFrames inserted."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from featurestore_data import random_groups

from hopsml import config
from hopsml.featurestore.store import FeatureStore


@pytest.fixture
def fs(spark, root):
    return FeatureStore(config.load())


def _rows(frame: pd.DataFrame) -> list[tuple]:
    frame = frame.sort_values(["customer", "ts"]).reset_index(drop=True)
    return [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)]


@pytest.mark.parametrize("seed", [4, 5])
def test_spark_and_duckdb_give_the_same_point_in_time_rows(fs, seed):
    label, spend, risk = random_groups(seed)
    groups = {}
    for name, frame in (("label", label), ("spend", spend), ("risk", risk)):
        window = dt.timedelta(minutes=40) if name == "spend" else None  # a staleness window on one group
        groups[name] = fs.create_feature_group(name, primary_key=["customer"], event_time="ts", ttl=window,
                                               partition_key=["customer"] if name == "risk" else None)
        groups[name].insert(frame)
    query = (groups["label"].select_all().join(groups["spend"].select(["spend"]))
             .join(groups["risk"].select(["risk"]), join_type="inner"))
    spark_rows = query.read(read_options={"engine": "spark"})
    duckdb_rows = query.read(read_options={"engine": "duckdb"})
    assert list(spark_rows.columns) == list(duckdb_rows.columns) == ["customer", "ts", "target", "spend", "risk"]
    assert 0 < len(duckdb_rows) < len(label)  # the inner join dropped rows with no earlier risk row
    assert _rows(spark_rows) == _rows(duckdb_rows)
    filtered = query.filter(groups["spend"].spend > 0.5)
    assert _rows(filtered.read(read_options={"engine": "spark"})) == \
        _rows(filtered.read(read_options={"engine": "duckdb"}))


def test_the_newest_row_wins_even_with_nulls_and_a_row_at_the_label_time_counts(fs):
    """The newest group row at or before the label's time gives its values, nulls included (not an older row's
    non-null value); a group row at exactly the label's time counts; a null key matches nothing."""
    t0 = pd.Timestamp("2026-01-01 00:00", tz="UTC")
    minute = pd.Timedelta(minutes=1)
    label = pd.DataFrame({"customer": [1, 1, 2, 3], "ts": [t0 + 10 * minute, t0 + 20 * minute, t0 + 5 * minute,
                                                           t0 + 5 * minute], "target": [0, 1, 0, 1]})
    spend = pd.DataFrame({"customer": [1, 1, 2, 3], "ts": [t0, t0 + 15 * minute, t0 + 5 * minute, t0 + 6 * minute],
                          "spend": [1.0, None, 7.0, 9.0]})
    groups = {}
    for name, frame in (("label", label), ("spend", spend)):
        groups[name] = fs.create_feature_group(name, primary_key=["customer"], event_time="ts")
        groups[name].insert(frame)
    query = groups["label"].select_all().join(groups["spend"].select(["spend"]))
    rows = _rows(query.read(read_options={"engine": "spark"}))
    assert [(customer, spend) for customer, _, _, spend in rows] == [(1, 1.0), (1, None), (2, 7.0), (3, None)]
    assert rows == _rows(query.read(read_options={"engine": "duckdb"}))
    # a joined group's key the left side does not select comes back, the joined row's (null without one), as
    # Hopsworks returns it; a same-named key the left selects comes back once
    keyed = groups["label"].select(["ts", "target"]).join(groups["spend"].select_all(), on=["customer"])
    for engine in ("spark", "duckdb"):
        frame = keyed.read(read_options={"engine": engine})
        assert list(frame.columns) == ["ts", "target", "customer", "spend_ts", "spend"], engine
        matched = sorted(((None if pd.isna(c) else int(c), None if pd.isna(s) else s)
                          for c, s in zip(frame["customer"], frame["spend"])), key=repr)
        assert matched == [(1, 1.0), (1, None), (2, 7.0), (None, None)], engine
    assert list(query.read(read_options={"engine": "spark"}).columns) == ["customer", "ts", "target", "spend"]


def test_spark_frames_in_and_out(fs, spark):
    frame = spark.createDataFrame(pd.DataFrame({"Id": [1, 2, 3], "ts": pd.to_datetime(["2024-01-01"] * 3, utc=True),
                                                "x": [1.5, 2.5, 3.5]}))
    fg = fs.create_feature_group("sparky", primary_key=["Id"], event_time="ts")
    fg.insert(frame)
    fg.insert(spark.createDataFrame(pd.DataFrame({"Id": [3], "ts": pd.to_datetime(["2024-01-01"], utc=True),
                                                  "x": [30.0]})))
    out = fg.read(dataframe_type="spark")
    assert out.orderBy("id").select("x").toPandas()["x"].tolist() == [1.5, 2.5, 30.0]
    old = fg.read(wallclock_time=fg.table.commits()[-1].committed_ms, read_options={"engine": "spark"})
    assert sorted(old["x"]) == [1.5, 2.5, 3.5]


def test_spark_tasks_write_the_files_and_an_update_rewrites_only_the_files_it_touches(fs, spark):
    """Spark's tasks write the Parquet files (no row goes through the driver) and the driver commits them: adds
    add files; updates rewrite the files holding the updated keys in one commit; the partitioned layout, the
    counts, time travel, statistics, checks and a failed first insert are as for a pandas insert."""
    import os

    from hopsml.errors import FeatureStoreError

    def frame(ids, hours, amounts, country="SE"):
        return spark.createDataFrame(pd.DataFrame({
            "Id": ids, "ts": [pd.Timestamp("2024-05-01", tz="UTC") + pd.Timedelta(hours=h) for h in hours],
            "Amount": amounts, "country": [country] * len(ids)}))

    fg = fs.create_feature_group("payments", primary_key=["Id"], event_time="ts", partition_key=["country"])
    with pytest.raises(FeatureStoreError, match="2 keys appear more than once"):
        fg.insert(frame([1, 1, 2, 2], [0, 0, 1, 1], [1.0, 2.0, 3.0, 4.0]), write_options={"duplicate_keys": "refuse"})
    assert not fg.table.exists()                  # refused before anything was written
    fg.insert(frame(list(range(100)), [0] * 100, [float(i) for i in range(100)]).repartition(4))
    fg.insert(frame([200, 201], [0, 0], [1.0, 2.0], country="DE"))       # only new keys: files added
    first, second = fg.table.commits()[::-1]
    assert (first.inserted, first.updated, first.operation) == (100, 0, "SPARK INSERT")
    assert (second.inserted, second.updated) == (2, 0)
    files_before = set(fg.table.files())
    fg.insert(frame([5, 300], [0, 0], [500.0, 3.0], country="SE"))      # key 5 is there: its file is rewritten
    third = fg.table.commits()[0]
    assert (third.inserted, third.updated) == (1, 1)
    files_after = set(fg.table.files())
    assert len(files_before - files_after) == 1                         # only the file holding key 5 left
    assert all(f"{os.sep}country=" in f for f in files_after)           # the partitioned layout
    assert not [d for d in os.listdir(fg.table.uri) if d.startswith("spark-")]   # no staging left behind

    rows = fg.read(read_options={"engine": "duckdb"}).sort_values("id").reset_index(drop=True)
    assert len(rows) == 103 and rows.loc[rows["id"] == 5, "amount"].item() == 500.0
    assert rows.groupby("country").size().to_dict() == {"DE": 2, "SE": 101}
    assert fg.read(wallclock_time=second.committed_ms)["amount"].sum() == sum(range(100)) + 3.0
    by_spark = fg.read(read_options={"engine": "spark"}).sort_values("id").reset_index(drop=True)
    assert by_spark[rows.columns].equals(rows)

    statistics = fg.get_statistics()
    assert statistics["commit"] == third.version
    amount = statistics["columns"]["amount"]
    assert amount["count"] == 103 and amount["max"] == 500.0 and sum(amount["histogram"]["counts"]) == 103
    assert statistics["columns"]["country"]["top"][0] == ["SE", 101]

    with pytest.raises(FeatureStoreError, match="column 'amount' is double in the group but string"):
        fg.insert(spark.createDataFrame(pd.DataFrame({"Id": [9], "ts": [pd.Timestamp("2024-05-02", tz="UTC")],
                                                      "Amount": ["x"], "country": ["SE"]})))
    assert fg.table.commits()[0].version == third.version               # the refused batch left no commit


def test_a_spark_insert_into_an_online_group_writes_the_newest_row_per_key_online(fs, spark):
    ts = [pd.Timestamp("2024-05-01", tz="UTC") + pd.Timedelta(hours=h) for h in (0, 3, 1)]
    fg = fs.create_feature_group("limits", primary_key=["id"], event_time="ts", online_enabled=True)
    fg.insert(spark.createDataFrame(pd.DataFrame({"id": [1, 1, 2], "ts": ts, "limit": [1.0, 3.0, 2.0]})))
    rows = fs.online().read(fg, [(1,), (2,)], fg.table.schema())
    assert (rows[(1,)]["limit"], rows[(2,)]["limit"]) == (3.0, 2.0)   # key 1: the later of its two rows


def test_a_spark_batch_that_repeats_a_key_keeps_its_last_row(fs, spark):
    """As a pandas batch: one row per key, the frame's last (Hopsworks' upsert), by Spark's tasks."""
    bureau = fs.create_feature_group("bureau", primary_key=["sk_id_bureau"])
    frame = spark.createDataFrame(pd.DataFrame({"sk_id_bureau": [5, 6, 5, 5], "status": ["C", "X", "0", "1"]}))
    bureau.insert(frame.coalesce(1))
    rows = bureau.read().sort_values("sk_id_bureau")
    assert rows["status"].tolist() == ["1", "X"]


def test_each_point_in_time_join_is_one_sort_merge_as_of_join_and_the_window_way_agrees(fs, spark, monkeypatch):
    """Where Spark has a sort-merge as-of join, each group's join is one (no join of every earlier row and window);
    the way kept for older Spark gives the same rows."""
    from hopsml.featurestore import engine

    if not engine.native_as_of(spark):
        pytest.skip(f"Spark {spark.version} has no sort-merge as-of join")
    label, spend, risk = random_groups(6)
    groups = {}
    for name, frame in (("label", label), ("spend", spend), ("risk", risk)):
        window = dt.timedelta(minutes=40) if name == "spend" else None
        groups[name] = fs.create_feature_group(name, primary_key=["customer"], event_time="ts", ttl=window)
        groups[name].insert(frame)
    query = (groups["label"].select_all().join(groups["spend"].select(["spend"]))
             .join(groups["risk"].select(["risk"]), join_type="inner"))
    frame = engine.spark_frame(query)
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert plan.count("SortMergeAsOfJoin") == 2 and "Window" not in plan
    native = _rows(frame.toPandas())
    monkeypatch.setattr(engine, "native_as_of", lambda _spark: False)
    assert _rows(engine.spark_frame(query).toPandas()) == native   # and DuckDB's rows: the tests above
