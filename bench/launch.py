"""Start-up cost of a distributed run: experiment.allreduce of a function that does nothing, 2 workers,
warm session, against two bare barrier stages: one whose tasks do nothing (the floor) and one whose tasks
exchange a string with Spark's BarrierTaskContext.allGather (about a second: what a rendezvous through Spark
costs; hopsml's ranks meet through the driver's channel instead). Interleaved, median of --reps; ratios
against the allGather stage.

    python bench/launch.py [--workers 2] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from hopsml import config, experiment
from hopsml.cluster import session


def bare_barrier_stage(sc, workers: int, gather: bool) -> None:
    def task(_):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        yield ctx.allGather(str(ctx.partitionId())) if gather else ctx.partitionId()

    sc.parallelize(range(workers), workers).barrier().mapPartitions(task).collect()


def noop() -> dict:
    return {"metric": 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("HOPSML_ROOT", tempfile.mkdtemp(prefix="hopsml-bench-"))
    sc = session.get_or_create(config.load()).sparkContext

    def hopsml_run() -> None:
        experiment.allreduce(noop, name="bench-noop", num_workers=args.workers)

    candidates = {"bare barrier stage": lambda: bare_barrier_stage(sc, args.workers, gather=False),
                  "bare barrier stage + allGather": lambda: bare_barrier_stage(sc, args.workers, gather=True),
                  "experiment.allreduce(noop)": hopsml_run}
    for fn in candidates.values():  # warm-up: python workers, imports
        fn()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(args.reps):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["bare barrier stage + allGather"]
    print(f"{args.workers} workers, warm session, median of {args.reps} (min-max)")
    for name, values in times.items():
        print(f"  {name:32s} {medians[name]:6.3f} s  ({min(values):.3f}-{max(values):.3f})  "
              f"ratio {medians[name] / base:.2f}x")


if __name__ == "__main__":
    main()
