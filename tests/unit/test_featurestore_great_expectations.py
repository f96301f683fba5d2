"""Great Expectations' own suites on feature groups, with the real package (1.x on the default stack, 0.18 beside
numpy 1.x): its objects and both JSON forms are taken as hopsworks takes them, hopsml's own checks agree with
Great Expectations' on the same batch, the rules hopsml does not check are evaluated by Great Expectations (and
refused when given where it is not installed), and the report keeps Great Expectations' shape."""

from __future__ import annotations

import importlib.util
import json
import logging
import re

import pandas as pd
import pyarrow as pa
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import expectations
from hopsml.featurestore.store import FeatureStore

RULES = [   # (type, kwargs): hopsml checks the first three itself, Great Expectations the last two
    ("expect_column_values_to_be_between", {"column": "amount", "min_value": 0, "max_value": 1000}),
    ("expect_column_values_to_not_be_null", {"column": "country"}),
    ("expect_column_values_to_be_in_set", {"column": "country", "value_set": ["SE", "DE"]}),
    ("expect_column_value_lengths_to_equal", {"column": "country", "value": 2}),
    ("expect_table_row_count_to_be_between", {"min_value": 1, "max_value": 3}),
]


@pytest.fixture
def gx():
    return pytest.importorskip("great_expectations")


@pytest.fixture
def fs(tmp_path):
    return FeatureStore(config.load(environ={}, root=str(tmp_path / "root"), project="gx"))


def _major(gx) -> int:
    return int(gx.__version__.split(".")[0])


def ge_suite(gx, name, rules):
    """The suite as a Great Expectations program of the installed version writes it."""
    if _major(gx) >= 1:
        classes = [getattr(gx.expectations, "".join(w.title() for w in kind.split("_"))) for kind, _ in rules]
        return gx.core.ExpectationSuite(name=name, expectations=[c(**kw) for c, (_, kw) in zip(classes, rules)])
    return gx.core.ExpectationSuite(expectation_suite_name=name, expectations=[
        gx.core.ExpectationConfiguration(expectation_type=kind, kwargs=kw) for kind, kw in rules])


def _orders(amounts, countries, ids=None):
    return pd.DataFrame({"order_id": ids or list(range(len(amounts))), "amount": amounts, "country": countries})


def test_a_great_expectations_suite_refuses_a_batch_naming_every_failed_rule(gx, fs, tmp_path):
    fg = fs.get_or_create_feature_group("orders", version=1, primary_key=["order_id"],
                                        expectation_suite=ge_suite(gx, "orders_checks", RULES))
    assert [e.own for e in fg.get_expectation_suite().expectations] == [True, True, True, False, False]
    _, report = fg.insert(_orders([10.0, 20.0], ["SE", "DE"]))
    assert report["success"] and report["ingestion_result"] == "INGESTED"
    assert report["meta"]["great_expectations_version"] == gx.__version__

    with pytest.raises(FeatureStoreError) as refused:
        fg.insert(_orders([5.0, -3.0, 2000.0, 7.0], ["SE", None, "FRA", "DE"], ids=[7, 8, 9, 10]))
    message = str(refused.value)
    assert "expect_column_values_to_be_between(column='amount', min_value=0" in message
    assert "2 of 4 rows, e.g. rows [1, 2] with [-3.0, 2000.0]" in message
    assert "expect_column_values_to_not_be_null(column='country'): 1 of 4 rows, e.g. rows [1]" in message
    assert re.search(r"expect_column_value_lengths_to_equal\(column='country', value=2(\.0)?\): 1 of 4 rows, e\.g\. "
                     r"rows \[2\] with \['FRA'\]", message)   # evaluated by Great Expectations (1.x makes 2 a float)
    assert "expect_table_row_count_to_be_between(min_value=1, max_value=3): observed 4" in message
    assert len(fg.read()) == 2 and len(fg.table.commits()) == 1

    folder = tmp_path / "root" / "Projects" / "gx" / "FeatureStore" / "orders_1" / "_validation"
    saved = json.loads(sorted(folder.iterdir())[-1].read_text())
    assert saved["ingestion_result"] == "REJECTED" and not saved["success"]
    assert saved["statistics"]["evaluated_expectations"] == 5 and saved["statistics"]["successful_expectations"] == 0
    lengths = saved["results"][3]
    assert lengths["expectation_config"]["expectation_type"] == "expect_column_value_lengths_to_equal"
    assert lengths["result"]["partial_unexpected_list"] == ["FRA"]
    assert lengths["result"]["partial_unexpected_index_list"] == [2]


@pytest.mark.parametrize("form", ["0.18", "1.x"])
def test_the_json_forms_of_both_versions(gx, fs, form):
    if form == "0.18":
        suite = {"expectation_suite_name": "checks", "expectations": [
            {"expectation_type": kind, "kwargs": kw, "meta": {"notes": "from 0.18"}} for kind, kw in RULES]}
    else:
        suite = {"name": "checks", "id": None, "expectations": [
            {"type": kind, "kwargs": kw, "meta": {}, "severity": "critical"} for kind, kw in RULES]}
    fg = fs.create_feature_group("orders", primary_key=["order_id"], expectation_suite=suite)
    assert fg.get_expectation_suite().name == "checks"
    report = fg.validate(_orders([1.0, 2.0], ["SE", "SWE"]))
    assert [r["success"] for r in report["results"]] == [True, True, False, False, True]
    assert "expect_column_value_lengths_to_equal(column='country', value=2): 1 of 2 rows, e.g. rows [1] with " \
           "['SWE']" in expectations.failures(report)


def test_an_always_suite_inserts_a_batch_great_expectations_fails_and_warns(gx, fs, caplog):
    fg = fs.create_feature_group("orders", primary_key=["order_id"])
    fg.save_expectation_suite(ge_suite(gx, "lengths", RULES[3:4]), validation_ingestion_policy="ALWAYS")
    caplog.set_level(logging.WARNING)
    _, report = fg.insert(_orders([1.0, 2.0], ["SE", "XYZ"]))
    assert not report["success"] and report["ingestion_result"] == "INGESTED" and len(fg.read()) == 2
    assert any("fails expectations" in r.getMessage() and "'XYZ'" in r.getMessage() for r in caplog.records)
    again = fs.get_feature_group("orders")   # kept with the group, in 0.18's form
    assert again.get_expectation_suite().to_dict()["expectations"][0]["expectation_type"] == RULES[3][0]


def test_the_suite_goes_back_to_a_great_expectations_suite(gx, fs):
    fg = fs.create_feature_group("orders", primary_key=["order_id"], expectation_suite=ge_suite(gx, "c", RULES))
    back = fg.get_expectation_suite().to_ge_type()
    assert isinstance(back, gx.core.ExpectationSuite)
    assert expectations.suite_of(back).to_dict() == fg.get_expectation_suite().to_dict()


# Batches where hopsml's own checks must say what Great Expectations says: nulls, repeats, bounds, `mostly`.
SAME = pa.table({"x": [1.0, None, 5.0, 5.0, 12.0, -1.0], "s": ["a1", "b2", None, "zz", "a1", "c"]})
OWN = [
    ("expect_column_values_to_be_between", {"column": "x", "min_value": 0, "max_value": 10}),
    ("expect_column_values_to_be_between", {"column": "x", "min_value": 5, "strict_min": True}),
    ("expect_column_values_to_be_between", {"column": "x", "min_value": 0, "max_value": 10, "mostly": 0.5}),
    ("expect_column_values_to_not_be_null", {"column": "x"}),
    ("expect_column_values_to_not_be_null", {"column": "s", "mostly": 0.8}),
    ("expect_column_values_to_be_unique", {"column": "x"}),
    ("expect_column_values_to_be_in_set", {"column": "s", "value_set": ["a1", "b2", "c"]}),
    ("expect_column_values_to_match_regex", {"column": "s", "regex": "^[a-z][0-9]$"}),
    ("expect_column_min_to_be_between", {"column": "x", "min_value": 0}),
    ("expect_column_max_to_be_between", {"column": "x", "max_value": 12}),
    ("expect_column_mean_to_be_between", {"column": "x", "min_value": 4, "max_value": 5}),
]


@pytest.mark.parametrize("kind, kwargs", OWN, ids=[f"{k}-{i}" for i, (k, _) in enumerate(OWN)])
def test_hopsml_checks_agree_with_great_expectations(gx, kind, kwargs):
    rule = expectations.Expectation(kind, kwargs)
    assert rule.own
    ours, theirs = expectations._own_result(rule, SAME), expectations._ge_results("same", [rule], SAME)[0]
    assert ours["success"] == theirs["success"]
    keys = ["unexpected_count", "observed_value"]
    if not (kind.endswith("not_be_null") and _major(gx) == 0):   # 0.18 lists neither the nulls nor their rows
        keys += ["partial_unexpected_index_list", "partial_unexpected_list"]
    for key in keys:
        assert ours["result"].get(key) == theirs["result"].get(key), key


def test_rules_great_expectations_would_refuse_are_refused_when_given(gx, fs):
    with pytest.raises(FeatureStoreError, match="'expect_column_values_to_be_purple' is not one hopsml checks, "
                                                "and Great Expectations .* refuses it"):
        fs.create_feature_group("x", primary_key=["id"], expectation_suite={"expectations": [
            {"expectation_type": "expect_column_values_to_be_purple", "kwargs": {"column": "id"}}]})
    with pytest.raises(FeatureStoreError, match="max_val"):   # a misspelt kwarg is not ignored
        fs.create_feature_group("x", primary_key=["id"], expectation_suite={"expectations": [
            {"expectation_type": "expect_column_value_lengths_to_be_between",
             "kwargs": {"column": "id", "min_value": 1, "max_val": 3}}]})


def test_a_row_condition_hands_a_known_rule_to_great_expectations(gx, fs):
    rule = {"column": "amount", "max_value": 100, "row_condition": 'country=="SE"', "condition_parser": "pandas"}
    fg = fs.create_feature_group("orders", primary_key=["order_id"], expectation_suite={"expectations": [
        {"expectation_type": "expect_column_values_to_be_between", "kwargs": rule}]})
    assert not fg.get_expectation_suite().expectations[0].own
    assert fg.validate(_orders([50.0, 500.0], ["SE", "DE"]))["success"]        # the 500 is not Swedish
    assert not fg.validate(_orders([500.0, 50.0], ["SE", "DE"]))["success"]


def test_without_great_expectations_only_its_rules_are_refused(fs, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "great_expectations"
                        else real(name, *a))
    with pytest.raises(FeatureStoreError, match="'expect_column_value_lengths_to_equal' is not one hopsml "
                                                "checks: Great Expectations would evaluate it, but it is not "
                                                "installed"):
        fs.create_feature_group("x", primary_key=["order_id"], expectation_suite={"expectations": [
            {"type": kind, "kwargs": kw} for kind, kw in RULES]})
    with pytest.raises(FeatureStoreError, match="'expect_column_values_to_be_between' with row_condition: "):
        fs.create_feature_group("x", primary_key=["order_id"], expectation_suite={"expectations": [
            {"type": RULES[0][0], "kwargs": {**RULES[0][1], "row_condition": "amount>1"}}]})
    fg = fs.create_feature_group("x", primary_key=["order_id"], expectation_suite={"name": "own", "expectations": [
        {"type": kind, "kwargs": kw} for kind, kw in RULES[:3]]})
    assert not fg.validate(_orders([1.0, -1.0], ["SE", "DE"]))["success"]
