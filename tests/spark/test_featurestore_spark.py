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
