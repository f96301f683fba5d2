"""The driver program of tests/cluster/test_search_cluster.py, on a cluster of two hosts of 2 slots each: an ASHA
search whose single-rank trials run in the long-lived slot tasks, then a grid search whose every trial is a
2-rank allreduce job (two at once on the 4 slots), where rank 1 of one trial raises and rank 1 of another
dies. Prints one JSON line per search on stdout: its record's slot and job entries and its trials."""

import json
import os
import sys

import pyspark

from hopsml import experiment


def climb(q, epochs):
    """A curve that rises with the budget; the host and process it ran in."""
    import os
    import socket

    return {"acc": q * (1 - 0.5 ** epochs), "host": socket.gethostname(), "pid": os.getpid()}


def ranked(x):
    """A trial of two ranks: the sum over ranks proves they are connected; rank 1 raises for x == 2 and its
    process dies for x == 4."""
    import os
    import socket
    import time

    from hopsml import collective

    if x == 2 and collective.rank() == 1:
        raise ValueError("rank 1 cannot go on with x=2")
    if x == 4 and collective.rank() == 1:
        os._exit(3)
    time.sleep(1.0)   # long enough that two trials overlap
    return {"metric": -abs(x - 3), "ranks": collective.allreduce(1.0),
            "hosts": collective.allgather(socket.gethostname())}


def report(step, logdir, best):
    with open(os.path.join(logdir, "experiment.json")) as f:
        record = json.load(f)
    with open(os.path.join(logdir, ".summary.json")) as f:
        trials = json.load(f)["trials"]
    print(json.dumps({"step": step, "best": best, "trials": trials, "jobs": record.get("jobs", []),
                      "parallel_trials": record.get("parallel_trials"), "promotions": record.get("promotions"),
                      "slot_utilisation": record.get("slot_utilisation")}), flush=True)


if __name__ == "__main__":
    logdir, best, _ = experiment.asha(climb, {"q": [0.0, 1.0]}, min_budget=1, max_budget=9, eta=3, num_trials=12,
                                      optimization_key="acc", seed=5, name="asha-on-two-hosts")
    report("asha", logdir, best)
    logdir, best, _ = experiment.grid_search(ranked, {"x": [1, 2, 3, 4]}, num_workers=2, name="ranked-on-two-hosts")
    report("distributed", logdir, best)
    pyspark.SparkContext._active_spark_context.stop()
    sys.exit(0)
