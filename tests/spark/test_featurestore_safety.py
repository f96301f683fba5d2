"""The Spark engine's side of the feature store's safety (tests/unit/test_featurestore_filters.py and
test_featurestore_names.py hold DuckDB's): the probe's injection payloads match no row (with the filter as SQL
text they matched every row and ran JVM methods), every filter operator with the generated hostile values keeps
the rows Python's comparison and DuckDB keep, and a group with a space, Unicode and glob characters in its name,
under a root with a space, takes Spark inserts and reads on both engines."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from featurestore_hostile import PROBES, cases, duckdb_answers, expected, rows, spark_answers

from hopsml import config
from hopsml.featurestore.store import FeatureStore


@pytest.fixture
def fs(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("HOPSML_ROOT", str(tmp_path / "root with space ü名"))
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    return FeatureStore(config.load())


def _ids(query, engine):
    table = query.read(dataframe_type="pyarrow", read_options={"engine": engine})
    return sorted(table.column("id").to_pylist())


def test_the_probe_payloads_match_no_row_on_spark(fs):
    fg = fs.create_feature_group("people", primary_key=["id"])
    fg.insert({"id": list(range(15)), "name": [f"user{i}" for i in range(15)]})
    for payload in PROBES:
        assert _ids(fg.filter(fg["name"] == payload), "spark") == []
    assert _ids(fg.filter(fg["name"].isin(PROBES) | (fg["name"] == "user3")), "spark") == [3]


def test_every_operator_with_hostile_values_gives_pythons_and_duckdbs_rows(fs, spark):
    fg = fs.create_feature_group("hostile", primary_key=["id"], event_time="ts")
    fg.insert(rows())
    table = fg.read(dataframe_type="pyarrow")
    checked = cases(fg)
    wanted = [expected(c, table) for c in checked]
    on_spark = spark_answers(spark, fg, checked)
    on_duckdb = duckdb_answers(fg, checked)
    wrong = [(c, got, want) for c, got, want in zip(checked, on_spark, wanted) if got != want]
    assert not wrong, f"{len(wrong)} of {len(checked)} filters differ from Python on Spark, e.g. {wrong[:3]}"
    assert on_spark == on_duckdb
    for condition, want in list(zip(checked, wanted))[::150]:   # a sample end to end, as Spark queries
        assert _ids(fg.filter(condition), "spark") == want, condition


def test_a_group_with_any_name_takes_spark_inserts_and_reads_on_both_engines(fs, spark):
    name = "sp ace ü名 {x}*"
    fg = fs.create_feature_group(name, primary_key=["id"], event_time="ts", partition_key=["kind"])
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

    def batch(ids, value):
        return spark.createDataFrame(pd.DataFrame({
            "id": ids, "ts": [t0 + dt.timedelta(hours=i) for i in ids], "x": [float(value * i) for i in ids],
            "kind": [["a b", "50%", "ü/x", "c:d"][i % 4] for i in ids]}))

    fg.insert(batch([1, 2, 3, 4], 1))
    fg.insert(batch([3, 4, 5], 10))   # rewrites the files holding 3 and 4 (read back by their paths)
    again = fs.get_feature_group(name)
    on_spark = again.read(read_options={"engine": "spark"}).sort_values("id")
    on_duckdb = again.read(read_options={"engine": "duckdb"}).sort_values("id")
    assert on_spark["x"].tolist() == on_duckdb["x"].tolist() == [1.0, 2.0, 30.0, 40.0, 50.0]
    assert on_spark["kind"].tolist() == on_duckdb["kind"].tolist() == ["50%", "ü/x", "c:d", "a b", "50%"]
    assert fs.after_commit_problems(again) == []
