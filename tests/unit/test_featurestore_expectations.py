"""Expectation suites on feature groups, in Great Expectations' JSON form: a failing batch is refused under
"STRICT" with every failed rule, its column and the failing rows named, and the table stays as it was; under
"ALWAYS" it is inserted with a warning; every report is kept, and insert returns it."""

from __future__ import annotations

import json
import logging

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.store import FeatureStore

SUITE = {"expectation_suite_name": "orders_checks", "expectations": [
    {"expectation_type": "expect_column_values_to_be_between", "kwargs": {"column": "amount", "min_value": 0,
                                                                           "max_value": 1000}},
    {"expectation_type": "expect_column_values_to_not_be_null", "kwargs": {"column": "country"}},
    {"expectation_type": "expect_column_values_to_be_in_set", "kwargs": {"column": "country",
                                                                          "value_set": ["SE", "DE"]}},
    {"type": "expect_column_values_to_be_unique", "column": "order_id"},   # Great Expectations 1.x's form
]}


@pytest.fixture
def fs(tmp_path):
    return FeatureStore(config.load(environ={}, root=str(tmp_path / "root"), project="ge"))


def _orders(amounts, countries, ids=None):
    ids = ids or list(range(len(amounts)))
    return pd.DataFrame({"order_id": ids, "amount": amounts, "country": countries})


def test_a_strict_suite_refuses_a_failing_batch_and_names_what_failed(fs, tmp_path):
    fg = fs.create_feature_group("orders", primary_key=["order_id"], expectation_suite=SUITE)
    _, report = fg.insert(_orders([10.0, 20.0], ["SE", "DE"]))
    assert report["success"] and report["ingestion_result"] == "INGESTED"
    with pytest.raises(FeatureStoreError) as refused:
        fg.insert(_orders([5.0, -3.0, 2000.0], ["SE", None, "FR"], ids=[7, 8, 9]))
    message = str(refused.value)
    assert "expect_column_values_to_be_between(column='amount', min_value=0, max_value=1000): 2 of 3 rows" in message
    assert "rows [1, 2] with [-3.0, 2000.0]" in message
    assert "expect_column_values_to_not_be_null(column='country'): 1 of 3 rows, e.g. rows [1]" in message
    assert "expect_column_values_to_be_in_set(column='country'" in message and "[2] with ['FR']" in message
    assert "expect_column_values_to_be_unique" not in message   # that rule held
    assert len(fg.read()) == 2 and len(fg.table.commits()) == 1   # nothing of the batch landed
    reports = sorted((tmp_path / "root" / "Projects" / "ge" / "FeatureStore" / "orders_1" / "_validation").iterdir())
    assert len(reports) == 2 and json.loads(reports[-1].read_text())["ingestion_result"] == "REJECTED"


def test_an_always_suite_inserts_and_warns(fs, caplog):
    fg = fs.create_feature_group("orders", primary_key=["order_id"])
    fg.save_expectation_suite(SUITE, validation_ingestion_policy="ALWAYS")
    caplog.set_level(logging.WARNING)
    _, report = fg.insert(_orders([1.0, 1.0], ["SE", "XX"]))
    assert not report["success"] and report["ingestion_result"] == "INGESTED" and len(fg.read()) == 2
    assert any("fails expectations" in r.getMessage() and "'XX'" in r.getMessage() for r in caplog.records)
    again = fs.get_feature_group("orders")   # the suite is kept with the group
    assert again.get_expectation_suite().validation_ingestion_policy == "ALWAYS"
    assert not again.validate(_orders([1.0], ["FR"]))["success"]
    _, skipped = again.insert(_orders([1.0], ["FR"], ids=[5]), validation_options={"run_validation": False})
    assert skipped is None


def test_bad_suites_are_refused_when_given(fs):
    with pytest.raises(FeatureStoreError, match="expect_table_row_count_to_equal' is not one hopsml checks"):
        fs.create_feature_group("x", primary_key=["id"], expectation_suite={"expectations": [
            {"expectation_type": "expect_table_row_count_to_equal", "kwargs": {"column": "id", "value": 3}}]})
    with pytest.raises(FeatureStoreError, match="validation_ingestion_policy 'SOMETIMES'"):
        fs.create_feature_group("x", primary_key=["id"]).save_expectation_suite(SUITE, validation_ingestion_policy=
                                                                                "sometimes")
