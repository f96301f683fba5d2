"""The driver program of tests/cluster/test_hosts.py: 4 ranks on a cluster of two namespace hosts. Prints one
JSON line per step on stdout."""

import json
import os
import socket
import sys

import numpy as np
import pyspark

from hopsml import collective, experiment
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


if __name__ == "__main__":
    logdir, _ = experiment.allreduce(train, name="hierarchical", num_workers=4, timeout_s=120)
    with open(os.path.join(logdir, "experiment.json")) as f:
        report("hierarchical", results=json.load(f)["results"])
    try:
        experiment.allreduce(killed, name="killed", num_workers=4, timeout_s=120)
        report("killed", error=None)
    except ExperimentFailed as error:
        report("killed", error=str(error))
    pyspark.SparkContext._active_spark_context.stop()
    sys.exit(0)
