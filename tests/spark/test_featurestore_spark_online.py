"""A Spark DataFrame inserted into an online-enabled group: the online table ends as the driver path's (pandas
batches) does, on SQLite (the driver streams the tasks' pieces) and on a real MariaDB server (the tasks write):
the newest row per key wins, a backfill never overwrites a newer row, a key repeated in one batch keeps its
newest row, and the same (key, event time) again is an update. No piece larger than `online_batch_rows` is
held, and on MariaDB none reaches the driver."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.featurestore import spark_insert, spark_online
from hopsml.featurestore.store import FeatureStore

T0 = dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc)
KEYS = 2000


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.slow)])
def fs(request, spark, root, tmp_path):
    online = request.getfixturevalue("mariadb_url") if request.param == "mariadb" else ""
    store = FeatureStore(config.load(project=f"so{tmp_path.name[-6:]}", online_store=online))
    yield store
    store.online().close()


def at(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


def _batches() -> list[pd.DataFrame]:
    ids = list(range(KEYS))
    first = pd.DataFrame({"id": ids + ids[:500], "ts": [at(0)] * KEYS + [at(1)] * 500,   # 500 keys twice: newer wins
                          "limit": [float(i) for i in ids] + [i + 0.5 for i in ids[:500]],
                          "country": ["SE"] * KEYS + ["DE"] * 500, "vip": [i % 2 == 0 for i in ids] + [True] * 500,
                          "since": [dt.date(2020, 1, 1 + i % 28) for i in ids] + [dt.date(2021, 1, 1)] * 500})
    older, newer = ids[::3], ids[1::3]                                # a backfill, and newer rows
    n = len(older) + len(newer)
    second = pd.DataFrame({"id": older + newer, "ts": [at(-1)] * len(older) + [at(2)] * len(newer),
                           "limit": [-1.0] * len(older) + [2.0] * len(newer),
                           "country": ["XX"] * len(older) + ["NO"] * len(newer), "vip": [False] * n,
                           "since": [dt.date(2019, 5, 5)] * n})
    again = ids[2::5]                                                 # their newest (key, time) once more: updates
    third = pd.DataFrame({"id": again, "ts": [at(1) if i < 500 else at(2) if i % 3 == 1 else at(0) for i in again],
                          "limit": [7.0] * len(again), "country": ["IT"] * len(again), "vip": [True] * len(again),
                          "since": [dt.date(2022, 2, 2)] * len(again)})
    return [first, second, third]


def _online(fs, group) -> list[dict]:
    rows = fs.online().rows(group, group.table.schema()).to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def test_the_tasks_write_the_table_the_driver_path_writes(fs, spark):
    by_driver = fs.create_feature_group("by_driver", primary_key=["id"], event_time="ts", online_enabled=True,
                                        statistics_config=False)
    by_spark = fs.create_feature_group("by_spark", primary_key=["id"], event_time="ts", online_enabled=True,
                                        statistics_config=False)
    for batch in _batches():
        by_driver.insert(batch)
        by_spark.insert(spark.createDataFrame(batch).repartition(3))
    assert by_spark.online_behind() is None and fs.after_commit_problems(by_spark) == []
    online = _online(fs, by_spark)
    assert online == _online(fs, by_driver) and len(online) == KEYS
    newest = by_driver.read().sort_values("ts").groupby("id").tail(1).set_index("id")   # the offline side's newest
    for row in online:
        assert (row["ts"], row["limit"], row["country"]) == (newest.at[row["id"], "ts"], newest.at[row["id"], "limit"],
                                                            newest.at[row["id"], "country"])
    assert {r["country"] for r in online} == {"SE", "DE", "NO", "IT"}   # the backfill (XX) overwrote nothing
    assert online[0]["limit"] == 0.5 and online[1]["limit"] == 2.0      # 0: the batch's newer row; 1: newer batch


def test_a_spark_frame_is_written_in_pieces_no_larger_than_asked(fs, spark):
    group = fs.create_feature_group("pieces", primary_key=["id"], event_time="ts", online_enabled=True,
                                    statistics_config=False)
    first = _batches()[0]
    group.insert(first.head(10))
    frame, schema, _ = spark_insert.prepared(spark.createDataFrame(first).repartition(4), group.primary_key,
                                             group.event_time, group.partition_key, group.table.schema(), group.key)
    held: list[int] = []
    done = spark_online.write(fs.online(), group, frame, schema, 300, observe=held.append)
    assert done.rows == KEYS and done.given == KEYS and done.largest <= 300 and done.pieces >= KEYS // 300
    if fs.online().dialect == "sqlite":   # the driver wrote what the tasks cut
        assert max(held) <= 300 and sum(held) == KEYS and len(held) == done.pieces
    else:                                 # the tasks wrote: nothing reached the driver
        assert held == []
    online = _online(fs, group)
    assert len(online) == KEYS and [r["limit"] for r in online[:3]] == [0.5, 1.5, 2.5]
