"""Filters never become SQL text: the probe's injection payloads and a generated set of hostile values (quotes,
backslashes, SQL comments, Unicode, NUL, very long strings, NaN, infinities, signed zeros, None) with every
filter operator give, on DuckDB, exactly the rows Python's own comparison gives (`Filter.holds`); values that
cannot be compared are refused naming the column. The same cases on Spark are in
tests/spark/test_featurestore_safety.py."""

from __future__ import annotations

import datetime as dt
import math

import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from featurestore_hostile import PROBES, cases, duckdb_answers, expected, rows

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import engine
from hopsml.featurestore.store import FeatureStore


@pytest.fixture
def fs(root):
    return FeatureStore(config.load())


@pytest.fixture
def hostile(fs):
    fg = fs.create_feature_group("hostile", primary_key=["id"], event_time="ts")
    fg.insert(rows())
    return fg


def _ids(query, engine_name="duckdb"):
    table = query.read(dataframe_type="pyarrow", read_options={"engine": engine_name})
    return sorted(table.column("id").to_pylist())


def test_the_probe_payloads_match_no_row(fs):
    fg = fs.create_feature_group("people", primary_key=["id"])
    fg.insert({"id": list(range(15)), "name": [f"user{i}" for i in range(15)]})
    for payload in PROBES:
        query = fg.filter(fg["name"] == payload)
        assert _ids(query) == []
        sql, params = engine.duckdb_statement(query)
        assert payload not in sql and params == [payload]   # a bound parameter, not text
    assert _ids(fg.filter(fg["name"] != PROBES[0])) == list(range(15))


def test_every_operator_with_hostile_values_gives_pythons_rows(hostile):
    table = hostile.read(dataframe_type="pyarrow")
    checked = cases(hostile)
    assert len(checked) > 400
    wanted = [expected(c, table) for c in checked]
    assert any(wanted) and not all(wanted)
    answers = duckdb_answers(hostile, checked)
    wrong = [(c, got, want) for c, got, want in zip(checked, answers, wanted) if got != want]
    assert not wrong, f"{len(wrong)} of {len(checked)} filters differ from Python, e.g. {wrong[:3]}"
    # and a sample end to end, as queries (a query with every case would take a minute)
    for condition, want in list(zip(checked, wanted))[::15]:
        assert _ids(hostile.filter(condition)) == want, condition


def test_nan_follows_python_not_sql(hostile):
    table = hostile.read(dataframe_type="pyarrow")
    with_value = sorted(r["id"] for r in table.to_pylist() if r["x"] is not None)
    nan_rows = [r["id"] for r in table.to_pylist() if r["x"] is not None and math.isnan(r["x"])]
    assert nan_rows   # the data holds NaN, and SQL would call it the greatest number and equal to itself
    assert _ids(hostile.filter(hostile["x"] == math.nan)) == []
    assert _ids(hostile.filter(hostile["x"] != math.nan)) == with_value
    assert not set(nan_rows) & set(_ids(hostile.filter(hostile["x"] >= -math.inf)))
    assert _ids(hostile.filter(hostile["x"] > math.inf)) == []


def test_values_that_cannot_be_compared_are_refused_naming_the_column(hostile):
    refused = [lambda: hostile["x"] == "1", lambda: hostile["name"] > 1, lambda: hostile["n"] == 1.5j,
               lambda: hostile["x"] < None, lambda: hostile["name"].like(1), lambda: hostile["name"].isin("abc"),
               lambda: hostile["n"] == 2 ** 64, lambda: hostile["x"].like("1%"), lambda: hostile["flag"] == 1,
               lambda: hostile["ts"] > "not a time"]
    for make in refused:
        with pytest.raises(FeatureStoreError, match="filter on '(x|name|n|flag|ts)'"):
            hostile.filter(make()).read()


def test_time_filters_take_iso_strings_and_naive_times_as_utc(hostile):
    table = hostile.read(dataframe_type="pyarrow")
    at = dt.datetime(2024, 1, 1, 5, tzinfo=dt.timezone.utc)
    want = expected(hostile["ts"] >= at, table)
    assert 0 < len(want) < table.num_rows
    for value in ("2024-01-01 05:00", "2024-01-01T05:00:00+00:00", "2024-01-01T07:00:00+02:00",
                  dt.datetime(2024, 1, 1, 5)):
        assert _ids(hostile.filter(hostile["ts"] >= value)) == want
    midnight = expected(hostile["ts"] < dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), table)
    assert _ids(hostile.filter(hostile["ts"] < dt.date(2024, 1, 2))) == midnight == list(range(24))


def test_numpy_and_pandas_values_are_plain_values(hostile):
    np = pytest.importorskip("numpy")
    table = hostile.read(dataframe_type="pyarrow")
    assert _ids(hostile.filter(hostile["n"] > np.int64(0))) == expected(hostile["n"] > 0, table)
    assert _ids(hostile.filter(hostile["x"] != np.float64("nan"))) == expected(hostile["x"] != math.nan, table)


def test_a_view_keeps_a_nan_filter_and_a_hostile_string(fs, hostile):
    condition = (hostile["x"] != math.nan) & (hostile["name"] != PROBES[1])
    view = fs.create_feature_view("kept", hostile.select_all().filter(condition))
    again = fs.get_feature_view("kept", view.version)
    assert _ids(again.query) == expected(condition, hostile.read(dataframe_type="pyarrow"))
    stored = again.query.filters[0]
    assert math.isnan(stored.left.value) and stored.right.value == PROBES[1]


def test_a_stored_filter_with_an_unknown_combination_is_refused(fs, hostile):
    from hopsml.featurestore.query import from_dict, to_dict

    record = to_dict(hostile.filter((hostile["x"] > 1) | (hostile["n"] > 1)))
    record["filters"][0]["logic"] = "OR 1=1) --"
    with pytest.raises(FeatureStoreError, match="AND or OR"):
        from_dict(record, lambda key: hostile)
