"""Point-in-time joins by the embedded engine (DuckDB) against a brute-force oracle on random data: each label
row gets, from each joined group, its key's row with the newest event time at or before its own, never a
later one; and a query as of a past commit leaves out rows committed later, even with old event times."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from featurestore_data import minutes, oracle, random_groups

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.store import FeatureStore


@pytest.fixture
def fs(tmp_path):
    return FeatureStore(config.load(environ={}, root=str(tmp_path / "root"), project="pit"))


def _same(got: list, want: list) -> bool:
    return all((g is None and w is None) or (g is not None and w is not None and abs(g - w) < 1e-12)
               for g, w in zip(got, want)) and len(got) == len(want)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_point_in_time_join_matches_the_oracle(fs, seed):
    label, spend, risk = random_groups(seed)
    groups = {}
    for name, frame in (("label", label), ("spend", spend), ("risk", risk)):
        groups[name] = fs.create_feature_group(name, primary_key=["customer"], event_time="ts")
        half = len(frame) // 2  # two commits each: the join reads the newest
        groups[name].insert(frame.iloc[:half])
        groups[name].insert(frame.iloc[half:])
    query = (groups["label"].select_all()
             .join(groups["spend"].select(["spend"]))
             .join(groups["risk"].select(["risk"]), prefix="r_"))
    got = query.read(read_options={"engine": "duckdb"})
    assert list(got.columns) == ["customer", "ts", "target", "spend", "r_risk"]
    got = got.sort_values(["customer", "ts"]).reset_index(drop=True)
    expected = label.sort_values(["customer", "ts"]).reset_index(drop=True)
    assert len(got) == len(label)
    spend_values = [None if pd.isna(v) else v for v in got["spend"]]
    risk_values = [None if pd.isna(v) else v for v in got["r_risk"]]
    assert _same(spend_values, oracle(expected, spend, "spend"))
    assert _same(risk_values, oracle(expected, risk, "risk"))
    assert any(v is None for v in spend_values)  # rows before a key's first feature row exist, and get nulls


def test_an_inner_join_drops_label_rows_without_an_earlier_feature_row(fs):
    label = fs.create_feature_group("label", primary_key=["customer"], event_time="ts")
    label.insert(pd.DataFrame({"customer": [1, 1, 2], "ts": [minutes(5), minutes(15), minutes(5)], "y": [0, 1, 0]}))
    spend = fs.create_feature_group("spend", primary_key=["customer"], event_time="ts")
    spend.insert(pd.DataFrame({"customer": [1, 1, 2], "ts": [minutes(10), minutes(20), minutes(6)],
                               "spend": [1.0, 2.0, 3.0]}))
    rows = label.select_all().join(spend.select(["spend"]), join_type="inner").read()
    assert rows.sort_values("ts")[["customer", "spend"]].values.tolist() == [[1, 1.0]]  # 15 min gets the 10 min row


def test_a_query_as_of_a_past_commit_leaves_out_a_later_backfill(fs):
    label = fs.create_feature_group("label", primary_key=["customer"], event_time="ts")
    label.insert(pd.DataFrame({"customer": [1], "ts": [minutes(100)], "y": [1]}))
    spend = fs.create_feature_group("spend", primary_key=["customer"], event_time="ts")
    spend.insert(pd.DataFrame({"customer": [1], "ts": [minutes(10)], "spend": [1.0]}))
    built = spend.table.commits()[0].committed_ms
    import time

    time.sleep(0.02)
    spend.insert(pd.DataFrame({"customer": [1], "ts": [minutes(50)], "spend": [99.0]}))  # a backfill, old event time
    query = label.select_all().join(spend.select(["spend"]))
    assert query.read()["spend"].tolist() == [99.0]                  # now the backfill is the latest before 100 min
    assert query.as_of(built).read()["spend"].tolist() == [1.0]      # as of the first build it was not there


def test_filters_on_either_side_and_join_errors(fs):
    label = fs.create_feature_group("label", primary_key=["customer"], event_time="ts")
    label.insert(pd.DataFrame({"customer": [1, 2, 3], "ts": [minutes(100)] * 3, "y": [1, 0, 1]}))
    spend = fs.create_feature_group("spend", primary_key=["customer"], event_time="ts")
    spend.insert(pd.DataFrame({"customer": [1, 2, 3], "ts": [minutes(10)] * 3, "spend": [5.0, 50.0, 500.0]}))
    query = label.select_all().join(spend.select(["spend"]))
    assert sorted(query.filter(spend.spend > 10).read()["customer"]) == [2, 3]
    assert sorted(query.filter((spend.spend < 10) | (label.y == 0)).read()["customer"]) == [1, 2]
    assert sorted(query.filter(label.ts <= minutes(100)).read()["customer"]) == [1, 2, 3]
    assert query.filter(label.ts < minutes(100)).read().empty
    other = fs.create_feature_group("other", primary_key=["account"])
    other.insert(pd.DataFrame({"account": [1], "z": [1]}))
    with pytest.raises(FeatureStoreError, match="cannot join 'other' on 'account'"):
        label.select_all().join(other.select_all())
    rows = label.select_all().join(other.select(["z"]), left_on=["customer"], right_on=["account"]).read()
    assert rows.sort_values("customer")["z"].tolist()[0] == 1


def test_a_join_without_keys_takes_the_part_of_the_right_primary_key_the_left_has(fs):
    """As Hopsworks: a group keyed (loan, customer) joins a customer-keyed group on customer alone."""
    customers = fs.create_feature_group("customers", primary_key=["customer"])
    customers.insert(pd.DataFrame({"customer": [1, 2], "age": [30, 40]}))
    loans = fs.create_feature_group("loans", primary_key=["loan", "customer"])
    loans.insert(pd.DataFrame({"loan": [10, 11, 12], "customer": [1, 1, 2], "amount": [5.0, 6.0, 7.0]}))
    query = customers.select_all().join(loans.select(["amount"]))
    assert (query.joins[0].left_on, query.joins[0].right_on) == (("customer",), ("customer",))
    rows = query.read().sort_values(["customer", "amount"])
    assert rows[["customer", "amount"]].values.tolist() == [[1, 5.0], [1, 6.0], [2, 7.0]]


@pytest.mark.parametrize("seed", [6, 7])
def test_a_staleness_window_leaves_out_feature_rows_older_than_the_groups_ttl(fs, seed):
    import datetime as dt

    label, spend, _ = random_groups(seed)
    window = dt.timedelta(minutes=30)   # about the mean gap between a key's rows
    label_group = fs.create_feature_group("label", primary_key=["customer"], event_time="ts")
    label_group.insert(label)
    stale = fs.create_feature_group("spend", primary_key=["customer"], event_time="ts", ttl=window)
    stale.insert(spend)
    assert fs.get_feature_group("spend").ttl == 30 * 60   # kept with the group
    expected = label.sort_values(["customer", "ts"]).reset_index(drop=True)
    got = (label_group.select_all().join(stale.select(["spend"])).read(read_options={"engine": "duckdb"})
           .sort_values(["customer", "ts"]).reset_index(drop=True))
    values = [None if pd.isna(v) else v for v in got["spend"]]
    assert _same(values, oracle(expected, spend, "spend", window))
    unbounded = oracle(expected, spend, "spend")
    assert sum(v is None for v in values) > sum(v is None for v in unbounded)  # the window took some matches away
    inner = label_group.select_all().join(stale.select(["spend"]), join_type="inner").read()
    assert len(inner) == sum(v is not None for v in values)
    filtered = label_group.select_all().join(stale.select(["spend"])).filter(stale.spend > 0.5).read()
    assert len(filtered) == sum(v is not None and v > 0.5 for v in values)  # a filter sees the windowed value
    with pytest.raises(FeatureStoreError, match="ttl=-5 is not a staleness window"):
        fs.create_feature_group("bad", primary_key=["customer"], event_time="ts", ttl=-5)


@pytest.mark.parametrize("seed", [8, 9])
def test_joins_taken_a_few_groups_a_statement_give_the_one_statements_rows(fs, seed, monkeypatch):
    """Over ONE_STATEMENT_UP_TO point-in-time joins, DuckDB joins a group or a few a statement and puts the rows
    back in the label rows' order: the same rows as one statement of all the joins, with a staleness window, an
    inner join, the same feature name twice and filters on a left and a joined column."""
    import datetime as dt

    from hopsml.featurestore import engine

    label, spend, risk = random_groups(seed)
    label_group = fs.create_feature_group("label", primary_key=["customer"], event_time="ts")
    label_group.insert(label)
    groups = []
    for i in range(3):
        window = dt.timedelta(minutes=30) if i == 1 else None
        group = fs.create_feature_group(f"spend{i}", primary_key=["customer"], event_time="ts", ttl=window)
        group.insert(spend.sample(frac=0.7, random_state=i))
        groups.append(group)
    risky = fs.create_feature_group("risk", primary_key=["customer"], event_time="ts")
    risky.insert(risk)
    query = label_group.select_all()
    for group in groups:
        query = query.join(group.select(["spend"]))
    query = query.join(risky.select(["risk"]), join_type="inner")
    filtered = query.filter(groups[1].spend > 0.3).filter(label_group.target > 0.5)

    def rows(frame: pd.DataFrame) -> list[tuple]:
        frame = frame.sort_values(["customer", "ts"]).reset_index(drop=True)
        return [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)]

    monkeypatch.setattr(engine, "ONE_STATEMENT_UP_TO", 10)
    one, one_filtered = rows(query.read()), rows(filtered.read())
    monkeypatch.setattr(engine, "ONE_STATEMENT_UP_TO", 3)
    for per_statement in (1, 3):   # a group a statement; 3 groups, then 1
        monkeypatch.setattr(engine, "AS_OF_JOINS_PER_STATEMENT", per_statement)
        assert rows(query.read()) == one and rows(filtered.read()) == one_filtered
    assert 0 < len(one_filtered) < len(one) < len(label)   # the filters and the inner join dropped rows
