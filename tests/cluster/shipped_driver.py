"""The driver program of the shipped-environment test: run by tests/cluster/test_shipped_environment.py with the
Python of a venv of its own, HOPSML_MASTER naming the cluster and no choice of the executors' Python, so they
run the environment hopsml packs and ships. Prints one JSON line per step on stdout."""

import json
import os
import socket
import sys

import pyspark

from hopsml import collective, experiment


def train():
    import model_def

    import hopsml

    ranks = collective.allgather({"host": socket.gethostname(), "executable": sys.executable})
    return {"executable": sys.executable, "hopsml": hopsml.__file__, "scaled": model_def.scale(collective.rank()),
            "python_env": os.environ.get("PYSPARK_PYTHON"), "ranks": ranks}


def trial(lr):
    import model_def

    return {"metric": model_def.scale(lr), "executable": sys.executable}


def report(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


if __name__ == "__main__":   # run as a program (pytest's doctest collection only imports it)
    sys.path.insert(0, sys.argv[1])   # the notebook's folder: model_def lives there, on the driver only
    logdir, result = experiment.allreduce(train, name="shipped", num_workers=2, timeout_s=120)
    report("allreduce", logdir=logdir, result=result)
    logdir, best, _ = experiment.grid_search(trial, {"lr": [1.0, 2.0, 3.0, 4.0]}, direction="max",
                                             optimization_key="metric", name="shipped-grid")
    report("grid", logdir=logdir, best=best)
    pyspark.SparkContext._active_spark_context.stop()   # a new session: the archive is found, not packed again
    logdir, result = experiment.allreduce(train, name="shipped-again", num_workers=2, timeout_s=120)
    report("again", logdir=logdir, result=result)
