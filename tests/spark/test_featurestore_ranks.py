"""The ranks of `experiment.allreduce` read a feature view's written training dataset by its view
(`fv:<view>:<version>/td<n>`), each its own shards of the split, opened by the rank itself: together the split's
rows once, with the values `fv.get_train_test_split(n)` gives (transformed)."""

from __future__ import annotations

import datetime as dt
import json
import os

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")
pytest.importorskip("torch")

from hopsml import config, experiment
from hopsml.featurestore.store import FeatureStore
from hopsml.featurestore.transformations import min_max_scaler

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


def _view(fs: FeatureStore):
    rng = np.random.default_rng(4)
    rows = 60
    frame = pd.DataFrame({"tx": np.arange(rows),
                          "ts": [T0 + dt.timedelta(minutes=int(m)) for m in rng.permutation(rows)],
                          "amount": rng.gamma(2.0, 20.0, rows).round(2), "items": rng.integers(1, 9, rows),
                          "fraud": rng.integers(0, 2, rows)})
    fg = fs.create_feature_group("tx", primary_key=["tx"], event_time="ts")
    fg.insert(frame)
    return fs.create_feature_view("fraud", fg.select(["tx", "amount", "items", "fraud"]), labels=["fraud"],
                                  transformation_functions=[min_max_scaler("amount")])


def _expected(features: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    return features.assign(label=labels["fraud"]).sort_values("tx", ignore_index=True)


def test_two_ranks_read_disjoint_shards_of_a_split_whose_union_is_the_split(spark, root):
    fs = FeatureStore(config.load())
    fv = _view(fs)
    # Written by DuckDB (small data): the Spark engine writes the same files (test_featurestore_spark_training.py)
    version, _ = fv.create_train_test_split(test_size=0.3, seed=5, shards=3)
    x_train, x_test, y_train, y_test = fv.get_train_test_split(version)
    fields = [*x_train.columns, "label"]
    assert "min_max_scaler_amount_" in fields   # the dataset holds the transformed values

    def train():
        import hopsml.torch as ht
        from hopsml import collective
        from hopsml.data import reader

        def rows(batches):
            return [[b[name][i].item() for name in fields] for b in batches for i in range(len(b["label"]))]

        seen = {"train": rows(ht.data_loader(f"fv:fraud:1/td{version}", fields=fields, batch_size=8)),
                "test": rows(reader(f"fv:fraud:1/td{version}", split="test", fields=fields, batch_size=8))}
        return {"rank": collective.rank(), "rows": json.dumps(seen)}

    logdir, _ = experiment.allreduce(train, name="td-ranks", num_workers=2)
    with open(os.path.join(logdir, "experiment.json")) as f:
        results = sorted(json.load(f)["results"], key=lambda r: r["rank"])
    seen = [json.loads(r["rows"]) for r in results]
    for split, expected in (("train", _expected(x_train, y_train)), ("test", _expected(x_test, y_test))):
        parts = [pd.DataFrame(rank[split], columns=fields) for rank in seen]
        assert all(len(part) for part in parts), split                       # each rank its own shards
        assert not set(parts[0]["tx"]) & set(parts[1]["tx"]), split          # disjoint
        both = pd.concat(parts).sort_values("tx", ignore_index=True)
        assert both["tx"].tolist() == expected["tx"].tolist(), split         # every row of the split once
        pd.testing.assert_frame_equal(both, expected, check_dtype=False)     # as the view gives them
    # rank 0 records what the run read, as for a prepared dataset: the dataset the reference was written to
    with open(os.path.join(logdir, "datasets.json")) as f:
        used = {d["name"]: d["splits"] for d in json.load(f)["datasets"]}
    assert used == {f"fraud_1_td{version}": ["test", "train"]}
