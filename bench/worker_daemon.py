"""What hopsml's worker daemon saves per Spark job: an empty 2-task job, PySpark's daemon against
``hopsml.cluster.worker_daemon``, each in its own fresh session (alternating, so noise hits both alike).

    python bench/worker_daemon.py [--jobs 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DAEMONS = ("pyspark.daemon", "hopsml.cluster.worker_daemon")


def time_empty_jobs(module: str, jobs: int) -> list[float]:
    """Seconds of each empty 2-task job in a session whose workers start from ``module``."""
    from hopsml import config
    from hopsml.cluster import session

    settings = config.load(root=tempfile.mkdtemp(prefix="hopsml-bench-"),
                           spark_conf={"spark.python.daemon.module": module})
    context = session.get_or_create(settings, app_name="hopsml-bench-daemon").sparkContext
    for _ in range(5):  # start the workers and warm the JVM
        context.parallelize(range(2), 2).mapPartitions(lambda rows: [1]).collect()
    times = []
    for _ in range(jobs):
        start = time.perf_counter()
        context.parallelize(range(2), 2).mapPartitions(lambda rows: [1]).collect()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--daemon", choices=DAEMONS, help=argparse.SUPPRESS)  # one session, in a child
    args = parser.parse_args()
    if args.daemon:
        print(" ".join(f"{t:.6f}" for t in time_empty_jobs(args.daemon, args.jobs)))
        return
    times: dict[str, list[float]] = {module: [] for module in DAEMONS}
    for _ in range(args.rounds):
        for module in DAEMONS:
            out = subprocess.run([sys.executable, __file__, "--daemon", module, "--jobs", str(args.jobs)],
                                 check=True, capture_output=True, text=True).stdout
            times[module] += [float(value) for value in out.split()[-args.jobs:]]
    base = statistics.median(times["pyspark.daemon"])
    print(f"Empty 2-task Spark job, median of {args.jobs * args.rounds} over {args.rounds} fresh sessions each")
    for module, values in times.items():
        median = statistics.median(values)
        print(f"  {module:22s} {median * 1e3:7.1f} ms  (pyspark.daemon / this {base / median:4.2f})")


if __name__ == "__main__":
    main()
