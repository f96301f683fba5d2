"""Feature groups on real Delta tables (delta-rs): history and upserts, commits and time travel, the schema
fixed at the first insert, and bad batches refused with the column and a sample value, leaving the table as
it was."""

from __future__ import annotations

import datetime as dt
import pathlib
import time

import pandas as pd
import pyarrow as pa
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.store import FeatureStore

T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)


def at(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


@pytest.fixture
def fs(tmp_path):
    return FeatureStore(config.load(environ={}, root=str(tmp_path / "root"), project="fs"))


def _transactions(ids, hours, amounts):
    return pd.DataFrame({"Customer_ID": ids, "ts": [at(h) for h in hours], "Amount": amounts})


def test_history_upserts_commits_and_time_travel(fs):
    fg = fs.get_or_create_feature_group("transactions", version=1, primary_key=["Customer_ID"], event_time="ts",
                                        description="card transactions")
    assert not fg.saved
    fg.insert(_transactions([1, 2], [0, 0], [10.0, 20.0]))
    first = max(fg.commit_details())
    time.sleep(0.01)
    fg.insert(_transactions([1, 1], [0, 5], [11.0, 15.0]))  # (1, 0h) again: an update; (1, 5h): history

    rows = fg.read().sort_values(["customer_id", "ts"]).reset_index(drop=True)
    assert list(rows.columns) == ["customer_id", "ts", "amount"]  # lower case, as Hopsworks stores names
    assert rows[["customer_id", "amount"]].values.tolist() == [[1, 11.0], [1, 15.0], [2, 20.0]]
    details = fg.commit_details()
    assert sorted(details) == [first, first + 1]
    newest = details[first + 1]
    assert (newest["rowsInserted"], newest["rowsUpdated"]) == (1, 1)
    assert details[first]["rowsInserted"] == 2

    committed = fg.table.commits()
    old = fg.read(wallclock_time=committed[-1].committed_on).sort_values("customer_id")
    assert old["amount"].tolist() == [10.0, 20.0]  # the first commit, before the update
    assert fg.select(["amount"]).as_of(committed[-1].committed_ms).read()["amount"].sum() == 30.0
    assert fs.get_feature_group("transactions").version == 1 and fs.get_feature_group("transactions").saved

    stats = fg.get_statistics()
    assert stats["commit"] == first + 1 and stats["columns"]["amount"]["count"] == 3
    assert fg.get_statistics(committed[-1].committed_ms)["columns"]["amount"]["max"] == 20.0


def test_frames_of_every_kind_and_epoch_millisecond_event_times(fs):
    import polars as pl

    fg = fs.create_feature_group("clicks", primary_key=["user"], event_time="when")
    epoch = int(T0.timestamp() * 1000)
    fg.insert(pl.DataFrame({"user": ["a"], "when": [epoch], "n": [1]}))
    fg.insert(pa.table({"user": ["b"], "when": [epoch + 1000], "n": [2]}))
    fg.insert(pd.DataFrame({"user": ["c"], "when": [epoch + 2000], "n": [3]}))
    rows = fg.read().sort_values("user")
    assert rows["when"].tolist()[0] == pd.Timestamp(T0)
    assert str(rows["when"].dtype).startswith("datetime64") and rows["n"].tolist() == [1, 2, 3]
    assert fg.version == 1 and fs.create_feature_group("clicks").version == 2  # the next free version


def test_parts_of_every_kind_are_one_insert_and_a_lazy_polars_frame_is_refused_by_name(fs):
    import polars as pl

    fg = fs.create_feature_group("parts", primary_key=["user"])
    fg.multi_part_insert(pd.DataFrame({"user": ["a"], "n": [1]}))
    fg.multi_part_insert(pa.table({"user": ["b"], "n": [2]}))
    fg.multi_part_insert(pl.DataFrame({"user": ["c"], "n": [3]}))
    fg.finalize_multi_part_insert()
    assert len(fg.table.commits()) == 1 and sorted(fg.read()["n"]) == [1, 2, 3]
    with pytest.raises(FeatureStoreError, match="cannot insert a polars.*LazyFrame"):
        fg.insert(pl.LazyFrame({"user": ["d"], "n": [4]}))


@pytest.mark.parametrize("batch, message", [
    (pd.DataFrame({"ts": [T0], "amount": [1.0]}), "has no column 'customer_id'"),
    (pd.DataFrame({"customer_id": [1, None], "ts": [T0, T0], "amount": [1.0, 2.0]}),
     "primary key column 'customer_id' is missing in 1 rows (e.g. row 1)"),
    (pd.DataFrame({"customer_id": [1, 2], "ts": [T0, None], "amount": [1.0, 2.0]}),
     "event time column 'ts' is missing in 1 rows"),
    (pd.DataFrame({"customer_id": [1], "ts": ["yesterday"], "amount": [1.0]}),
     "event_time column 'ts' is string, not a time (e.g. 'yesterday')"),
    (pd.DataFrame({"customer_id": [1], "ts": [T0], "amount": ["lots"]}),
     "column 'amount' is double in the group but string in this batch (e.g. 'lots')"),
])
def test_bad_batches_are_refused_and_the_table_stays_as_it_was(fs, batch, message):
    fg = fs.get_or_create_feature_group("tx", 1, primary_key=["customer_id"], event_time="ts")
    fg.insert(_transactions([1], [0], [1.0]))
    before = fg.table.latest_version()
    with pytest.raises(FeatureStoreError, match=None) as refused:
        fg.insert(batch)
    assert message in str(refused.value)
    assert fg.table.latest_version() == before and len(fg.read()) == 1


def test_a_batch_that_repeats_a_key_keeps_its_last_row_as_hopsworks_upsert_does(fs, caplog):
    """credit_scores' bureau balances: primary_key=['sk_id_bureau'], no event time, keys repeated in one file.
    Hopsworks takes the batch (Hudi's record key is the primary key and event time; of equal keys the later row
    wins), so one row per key lands, the last; the write option duplicate_keys='refuse' keeps the strict check."""
    bureau = fs.get_or_create_feature_group("bureau_balances", version=1, primary_key=["sk_id_bureau"])
    batch = pd.DataFrame({"SK_ID_BUREAU": [5, 6, 5, 7, 5, 6], "months_balance": [-3, -1, -2, 0, -1, -4],
                          "status": ["C", "X", "0", "C", "1", "X"]})
    with pytest.raises(FeatureStoreError, match="2 keys appear more than once in the batch, e.g. "
                                                r"\{'sk_id_bureau': 5\} \(3 rows\); the write option "
                                                "duplicate_keys='refuse'"):
        bureau.insert(batch, write_options={"duplicate_keys": "refuse"})
    assert not bureau.table.exists()
    with caplog.at_level("WARNING", logger="hopsml.featurestore.frames"):
        bureau.insert(batch)
    assert "2 keys appear more than once in the batch" in caplog.text and "3 rows left out" in caplog.text
    rows = bureau.read().sort_values("sk_id_bureau").reset_index(drop=True)
    assert rows.to_dict("list") == {"sk_id_bureau": [5, 6, 7], "months_balance": [-1, -4, 0],
                                    "status": ["1", "X", "C"]}
    # with an event time, the same key at other times is history; only the same (key, time) is a duplicate
    timed = fs.get_or_create_feature_group("tx", 1, primary_key=["customer_id"], event_time="ts")
    timed.insert(pd.DataFrame({"customer_id": [7, 7, 7], "ts": [T0, T0, at(1)], "amount": [1.0, 2.0, 3.0]}))
    assert sorted(timed.read()["amount"]) == [2.0, 3.0]
    with pytest.raises(FeatureStoreError, match="duplicate_keys='maybe'"):
        timed.insert(pd.DataFrame({"customer_id": [8], "ts": [T0], "amount": [1.0]}),
                     write_options={"duplicate_keys": "maybe"})


def test_a_new_nullable_column_is_a_recorded_schema_change(fs):
    fg = fs.get_or_create_feature_group("tx", 1, primary_key=["customer_id"], event_time="ts")
    fg.insert(_transactions([1], [0], [1.0]))
    fg.insert(pd.DataFrame({"customer_id": [2], "ts": [at(1)], "amount": [2.0], "country": ["SE"]}))
    rows = fg.read().sort_values("customer_id")
    assert pd.isna(rows["country"].tolist()[0]) and rows["country"].tolist()[1] == "SE"
    newest = fg.commit_details()[fg.table.latest_version()]
    assert newest["addedColumns"] == ["country"]
    assert [f.name for f in fs.get_feature_group("tx", 1).features] == ["customer_id", "ts", "amount", "country"]
    fg.insert(_transactions([3], [2], [3.0]))  # a later batch without the new column: nulls there
    assert len(fg.read()) == 3


def test_names_that_differ_only_in_case_and_missing_groups_are_named(fs):
    fg = fs.get_or_create_feature_group("tx", 1, primary_key=["id"])
    with pytest.raises(FeatureStoreError, match="'id' and 'ID' differ only in case"):
        fg.insert(pd.DataFrame({"id": [1], "ID": [2]}))
    with pytest.raises(FeatureStoreError, match="no feature group 'nope' in project 'fs'"):
        fs.get_feature_group("nope")
    with pytest.raises(FeatureStoreError, match="has no data yet"):
        fg.read()
    with pytest.raises(FeatureStoreError, match="hopsml has no Kafka streaming inserts|stream feature groups"):
        fs.create_feature_group("s", primary_key=["id"], stream=True)


def test_a_group_without_event_time_is_keyed_by_its_primary_key(fs):
    fg = fs.get_or_create_feature_group("profiles", 1, primary_key=["id"])
    fg.insert(pd.DataFrame({"id": [1, 2], "age": [30, 40]}))
    fg.insert(pd.DataFrame({"id": [2, 3], "age": [41, 50]}))
    assert fg.read().sort_values("id")["age"].tolist() == [30, 41, 50]


def test_a_partition_key_lays_the_table_out_in_folders_every_reader_reads(fs):
    fg = fs.create_feature_group("visits", primary_key=["id"], event_time="ts", partition_key=["Country", "day"])
    frame = pd.DataFrame({"id": [1, 2, 3, 4], "ts": [at(0), at(1), at(2), at(30)],
                          "Country": ["SE", "007", None, "a b/c"], "day": [at(h).date() for h in (0, 1, 2, 30)],
                          "spend": [1.0, 2.0, 3.0, 4.0]})
    fg.insert(frame)
    fg.insert(pd.DataFrame({"id": [1, 5], "ts": [at(0), at(40)], "Country": ["SE", "SE"],
                            "day": [at(0).date(), at(40).date()], "spend": [10.0, 5.0]}))   # an upsert, and a row
    folders = {p.relative_to(fg.table.uri).parts[:2] for p in pathlib.Path(fg.table.uri).rglob("*.parquet")}
    assert ("country=SE", "day=2024-05-01") in folders and ("country=007", "day=2024-05-01") in folders
    assert [f.name for f in fg.table.partitioning()] == ["country", "day"]
    rows = fg.read().sort_values("id").reset_index(drop=True)
    assert [None if pd.isna(c) else c for c in rows["country"]][:4] == ["SE", "007", None, "a b/c"]  # '007': a string
    assert rows["spend"].tolist() == [10.0, 2.0, 3.0, 4.0, 5.0]
    assert rows["day"].tolist()[3] == at(30).date()
    assert fg.filter(fg.country == "SE").read()["spend"].sum() == 15.0
    arrow = fg.table.read()
    assert arrow.schema.field("country").type == pa.string() and arrow.num_rows == 5
    with pytest.raises(FeatureStoreError, match="partition_key column 'spend' is double"):
        fs.create_feature_group("bad", primary_key=["id"], partition_key=["spend"]).insert(frame)
    with pytest.raises(FeatureStoreError, match="partition_key column 'nope' is not in the batch"):
        fs.create_feature_group("bad", primary_key=["id"], partition_key=["nope"]).insert(frame)
