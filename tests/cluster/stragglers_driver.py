"""The driver program of tests/cluster/test_stragglers.py, on a cluster of two hosts: a 2-rank allreduce whose rank
1 waits 40 ms longer for each batch, then a balanced one; with the argument 4, one 4-rank allreduce whose rank 2
waits longer. Prints one JSON line per run on stdout: what its record says of stragglers and system metrics, and
the ranks' results."""

import json
import os
import sys

import pyspark

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: timeline_steps

from timeline_steps import slowed_train

from hopsml import experiment


def report(step, logdir):
    with open(os.path.join(logdir, "experiment.json")) as f:
        record = json.load(f)
    with open(os.path.join(logdir, "timeline", "trace.json")) as f:
        trace = json.load(f)
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "collective" and e["name"] == "allreduce"]
    waits = {rank: sorted(e["args"]["wait_us"] for e in ops if e["pid"] == rank) for rank in {e["pid"] for e in ops}}
    print(json.dumps({"step": step, "results": record["results"], "stragglers": record["stragglers"],
                      "system": record["system"], "median_wait_us": {r: w[len(w) // 2] for r, w in waits.items()},
                      "clock_error_bound_us": trace["metadata"]["clock_error_bound_us"]}), flush=True)


if __name__ == "__main__":
    ranks = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    runs = (("slowed", 1), ("balanced", None)) if ranks == 2 else (("slowed-of-4", 2),)
    for step, slow_rank in runs:
        logdir, _ = experiment.allreduce(slowed_train(slow_rank, "input", final_mib=8), name=step,
                                         num_workers=ranks, timeout_s=120)
        report(step, logdir)
    pyspark.SparkContext._active_spark_context.stop()
    sys.exit(0)
