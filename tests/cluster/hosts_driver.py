"""The driver program of tests/cluster/test_hosts.py: 4 ranks on a cluster of two namespace hosts. Prints one
JSON line per step on stdout."""

import datetime as dt
import json
import os
import socket
import sys

import numpy as np
import pandas as pd
import pyspark

from hopsml import collective, config, experiment
from hopsml.errors import ExperimentFailed


def train():
    comm = collective.current()
    large = np.full(1 << 20, comm.rank + 1.0, dtype=np.float32)  # 4 MiB: past the one-exchange size
    collective.allreduce(large)
    small = np.full(16, comm.rank + 1.0)
    collective.allreduce(small)
    mean = np.full(1 << 18, comm.rank + 1.0)
    collective.allreduce(mean, op="mean")
    return {"rank": comm.rank, "hostname": socket.gethostname(), "master_addr": os.environ["MASTER_ADDR"],
            "shared_memory_peers": comm.shared_memory_peers, "allreduce_path": comm.allreduce_path,
            "large": [float(large.min()), float(large.sum(dtype=np.float64))] if large.min() == large.max()
            else ["unequal", float(large.min()), float(large.max())],
            "small": float(small[0]) if len(set(small)) == 1 else None,
            "mean": float(mean[0]) if len(set(mean[:8])) == 1 and mean.min() == mean.max() else None}


def killed():
    if collective.rank() == 3:
        print("rank 3 about to vanish", flush=True)
        os._exit(3)
    collective.allreduce(np.ones(1 << 20, dtype=np.float32))
    return 1.0


def report(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def rows_to_driver(label):
    """Counts the rows holding `label` that any of Spark's ways to the driver's Python brings there."""
    from pyspark.sql import DataFrame

    crossed = []

    def counted(name, measure):
        original = getattr(DataFrame, name)

        def wrapper(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            rows, columns = measure(self, result)
            if label in columns:
                crossed.append(rows)
            return result
        setattr(DataFrame, name, wrapper)

    counted("collect", lambda self, rows: (len(rows), rows[0].asDict() if rows else self.columns))
    counted("tail", lambda self, rows: (len(rows), self.columns))
    counted("toArrow", lambda self, table: (table.num_rows, table.column_names))
    counted("toPandas", lambda self, frame: (len(frame), list(frame.columns)))
    counted("toLocalIterator", lambda self, rows: (1, self.columns))
    return crossed


def training_dataset_on_the_executors():
    """A view's train/test split made by the cluster's executors (the Spark engine), then read by 4 ranks, each its
    own shard: (the split's row count, the rows the driver's Python saw, each rank's tx values)."""
    from hopsml.featurestore.store import FeatureStore
    from hopsml.featurestore.transformations import min_max_scaler

    rng = np.random.default_rng(7)
    rows = 400
    start = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
    frame = pd.DataFrame({"tx": np.arange(rows), "ts": [start + dt.timedelta(minutes=int(m)) for m in range(rows)],
                          "amount": rng.gamma(2.0, 20.0, rows).round(2), "fraud": rng.integers(0, 2, rows)})
    fs = FeatureStore(config.load())
    group = fs.create_feature_group("tx", primary_key=["tx"], event_time="ts")
    group.insert(frame)
    view = fs.create_feature_view("fraud", group.select(["tx", "amount", "fraud"]), labels=["fraud"],
                                  transformation_functions=[min_max_scaler("amount")])
    crossed = rows_to_driver("fraud")
    version, _ = view.create_train_test_split(test_size=0.25, seed=3, shards=4, read_options={"engine": "spark"})
    seen_by_driver = sum(crossed)
    train_rows = view.get_train_test_split(version)[0].shape[0]

    def read():
        from hopsml.data import reader

        tx = [int(v) for batch in reader(f"fv:fraud:1/td{version}", fields=["tx", "label"], batch_size=64)
              for v in batch["tx"]]
        return {"rank": collective.rank(), "hostname": socket.gethostname(), "tx": json.dumps(tx)}

    logdir, _ = experiment.allreduce(read, name="training-dataset", num_workers=4, timeout_s=120)
    with open(os.path.join(logdir, "experiment.json")) as f:
        results = json.load(f)["results"]
    return train_rows, seen_by_driver, {r["rank"]: json.loads(r["tx"]) for r in results}


if __name__ == "__main__":
    logdir, _ = experiment.allreduce(train, name="hierarchical", num_workers=4, timeout_s=120)
    with open(os.path.join(logdir, "experiment.json")) as f:
        report("hierarchical", results=json.load(f)["results"])
    try:
        experiment.allreduce(killed, name="killed", num_workers=4, timeout_s=120)
        report("killed", error=None)
    except ExperimentFailed as error:
        report("killed", error=str(error))
    train_rows, seen_by_driver, read = training_dataset_on_the_executors()
    report("training_dataset", train_rows=train_rows, seen_by_driver=seen_by_driver, read=read)
    pyspark.SparkContext._active_spark_context.stop()
    sys.exit(0)
