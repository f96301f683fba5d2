"""Small work in a session that has started Spark: a 500-row ``prepare_table``, a no-op ``experiment.launch`` and
a small one, as ratios against issue 56's figures (7.9 s, 1.4 s, 4.5 s); then where preparing a table in the
driver (``small_table_rows``, no Spark job) stops being faster than the Spark job.

    python bench/small_work.py [--repeat 3] [--rows 500,2000,5000,10000,20000,40000,80000,160000] [--master local[4]]

Each figure is the median of ``--repeat`` runs, the two engines interleaved per size (Spark, local, Spark, ...);
the load average is printed beside each, as the machine may be shared. A file over 4 MiB (or 100,000 rows) is prepared
in the driver only here, to find the crossover (marked *): prepare_table sends it to Spark, whose sums then run per
partition (and whose shard writers get several Arrow batches).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BASELINES = {"500-row prepare_table": 7.9, "no-op experiment.launch": 1.4, "small experiment.launch": 4.5}


def noop() -> dict:
    return {"metric": 0.0}


def small(lr: float = 0.1) -> dict:
    """A small model: logistic regression by gradient descent on 500 rows, its loss logged as it goes."""
    import numpy as np

    from hopsml import tensorboard

    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 10))
    y = (x @ rng.normal(size=10) > 0).astype(float)
    w = np.zeros(10)
    for step in range(50):
        p = 1 / (1 + np.exp(-x @ w))
        w -= lr * x.T @ (p - y) / len(y)
        if step % 10 == 0:
            tensorboard.log({"loss": float(-np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9)))},
                            step=step)
    return {"accuracy": float(((x @ w > 0) == y).mean())}


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> None:
    from table_prep import write_csv

    from hopsml import config, experiment
    from hopsml.cluster import session
    from hopsml.data.tables import local as local_engine
    from hopsml.data.tables import prepare_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rows", default="500,2000,5000,10000,20000,40000,80000,160000",
                        help="sizes of the crossover table")
    parser.add_argument("--master", default="local[4]")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="small_work_")
    os.environ["HOPSML_ROOT"] = os.path.join(work, "root")
    settings = config.load(environ={}, root=os.path.join(work, "root"), project="bench", master=args.master)
    by_spark = dataclasses.replace(settings, small_table_rows=0)
    local = dataclasses.replace(settings, small_table_rows=10**9)
    spark = session.get_or_create(settings)
    print(f"Spark {spark.version}, {spark.sparkContext.master}, {os.cpu_count()} CPUs, {_load()}")

    src = os.path.join(work, "t500.csv")
    write_csv(src, 500)

    def prep(chosen, path=src):
        return prepare_table(path, "t", label="label", overwrite=True, settings=chosen, spark=spark)

    prep(by_spark)   # warm-up: the JVM's code, the Python workers, the imports
    prep(settings)
    experiment.launch(noop, name="warm-up")
    runs = {"500-row prepare_table": lambda: prep(settings), "no-op experiment.launch":
            lambda: experiment.launch(noop, name="noop"), "small experiment.launch":
            lambda: experiment.launch(small, name="small")}
    times: dict[str, list[float]] = {name: [] for name in runs}
    spark_prep: list[float] = []
    for _ in range(args.repeat):
        spark_prep.append(_timed(lambda: prep(by_spark)))
        for name, fn in runs.items():
            times[name].append(_timed(fn))
    print(f"\nsmall work, median of {args.repeat} ({_load()}); ratio = issue 56's figure / now")
    print(f"  {'':28s} {'issue':>7s} {'now':>7s} {'ratio':>6s}")
    for name, values in times.items():
        now = statistics.median(values)
        print(f"  {name:28s} {BASELINES[name]:6.2f}s {now:6.3f}s {BASELINES[name] / now:5.1f}x")
    print(f"  {'(the Spark job, same table)':28s} {'':7s} {statistics.median(spark_prep):6.3f}s")

    print(f"\nprepare_table: Spark job against the driver (small_table_rows), median of {args.repeat}")
    print(f"  {'rows':>7s} {'MiB':>5s} {'Spark s':>8s} {'local s':>8s} {'Spark/local':>11s}  load")
    for rows in [int(r) for r in args.rows.split(",") if r.strip()]:
        path = os.path.join(work, f"t{rows}.csv")
        write_csv(path, rows)
        beyond = os.path.getsize(path) > local_engine.ONE_PARTITION_BYTES
        local_engine.ONE_PARTITION_BYTES = max(local_engine.ONE_PARTITION_BYTES, os.path.getsize(path))
        local_engine.ONE_BATCH_ROWS = max(local_engine.ONE_BATCH_ROWS, rows)
        spark_s, local_s = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            prep(by_spark, path)
            spark_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            summary = prep(local, path)
            local_s.append(time.perf_counter() - started)
            if summary.engine != "local":
                raise SystemExit(f"{rows} rows were not prepared locally: see the log")
        a, b = statistics.median(spark_s), statistics.median(local_s)
        print(f"  {rows:>7d}{'*' if beyond else ' '}{os.path.getsize(path) / 2**20:5.2f} {a:8.3f} {b:8.3f} "
              f"{a / b:11.1f}  {_load()}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
