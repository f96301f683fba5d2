"""The driver program of the standalone-cluster test: run by tests/cluster/test_standalone.py in its own
process (one SparkContext per process), with HOPSML_MASTER naming the cluster. Prints one JSON line per
step on stdout."""

import json
import os
import sys

import numpy as np
import pyspark

from hopsml import collective, experiment
from hopsml.errors import SettingsError


def executor_id():
    """The id of the executor JVM this Python worker descends from (from its command line)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
        if "--executor-id" in args:
            return args[args.index("--executor-id") + 1]
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return None


def train():
    values = np.full(4, collective.rank() + 1.0)
    collective.allreduce(values, op="sum")
    return {"sum": float(values[0]), "rank": collective.rank(), "master_port": int(os.environ["MASTER_PORT"]),
            "master_addr": os.environ["MASTER_ADDR"], "executor": executor_id(),
            "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME")}


def report(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def refused(name):
    """Run an experiment that must be refused; says whether it was, and whether a JVM is up."""
    try:
        experiment.allreduce(train, name=name, num_workers=2)
    except SettingsError as error:
        return str(error)
    return None


if __name__ == "__main__":
    os.environ["HOPSML_SHARED_ROOT"] = "false"
    report("unshared", error=refused("unshared"), jvm=pyspark.SparkContext._active_spark_context is not None)
    os.environ["HOPSML_SHARED_ROOT"] = "true"
    logdir, result = experiment.allreduce(train, name="standalone", num_workers=2, timeout_s=120)
    sc = pyspark.SparkContext._active_spark_context
    report("shared", logdir=logdir, result=result, master=sc.master)
    os.environ["HOPSML_SHARED_ROOT"] = "false"
    report("unshared-active", error=refused("unshared-active"))
    sc.stop()
    sys.exit(0)
