"""Throughput of ``prepare_table`` against the plain PySpark job, side by side in one run.

    python bench/table_prep.py [--rows 100000,1000000,5000000] [--repeat 3] [--small 500] [--master local[*]]

For each size a CSV of generated rows (8 doubles, 2 whole numbers, one category, a 0/1 label, a few
missing cells) is written once, then timed twice on the same Spark session:

* plain: ``spark.read.csv(header=True, inferSchema=True)``, ``dropna()``, ``randomSplit([0.8, 0.2])``,
  ``write.parquet`` of both splits: what one writes by hand.
* hopsml: ``prepare_table(..., label="label")``: typing as written, rejects, statistics, the fit,
  Parquet and TFRecord shards of both splits.

Prints rows/s of each and the ratio of their times (target: at most 2x at 1M rows and beyond), and
the time of a ``--small``-row table inside the running session (target: under 3 s). With
``--repeat N`` the two run in turn N times per size (plain, hopsml, plain, ...) and the medians are
printed, with the median of the ratios of each pair (a shared machine's speed drifts).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_csv(path: str, rows: int, seed: int = 0, chunk: int = 500_000) -> None:
    """A table of ``rows`` generated rows, written by pandas in chunks."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    with open(path, "w") as out:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            frame = pd.DataFrame({f"x{i}": rng.normal(size=n).round(5) for i in range(8)})
            frame["n0"] = rng.integers(0, 100, n)
            frame["n1"] = rng.integers(-1000, 1000, n)
            frame["kind"] = rng.choice(["red", "green", "blue", "grey"], n)
            frame["label"] = rng.integers(0, 2, n)
            frame.loc[rng.random(n) < 0.001, "x3"] = np.nan
            frame.to_csv(out, index=False, header=start == 0)


def plain_job(spark, src: str, out: str) -> None:
    """What one writes by hand in PySpark."""
    frame = spark.read.csv(src, header=True, inferSchema=True).dropna()
    train, test = frame.randomSplit([0.8, 0.2], seed=0)
    train.write.mode("overwrite").parquet(os.path.join(out, "train"))
    test.write.mode("overwrite").parquet(os.path.join(out, "test"))


def main(argv: list[str] | None = None) -> None:
    from hopsml import config
    from hopsml.cluster import session
    from hopsml.data.tables import prepare_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="100000,1000000,5000000", help="comma-separated sizes")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each per size; medians are printed")
    parser.add_argument("--small", type=int, default=500, help="rows of the small table timed in the running session")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--workdir", default=None, help="where the CSVs and outputs go (default: a temporary folder)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.rows.split(",") if s.strip()]

    work = args.workdir or tempfile.mkdtemp(prefix="table_prep_")
    settings = config.load(environ={}, root=os.path.join(work, "root"), project="bench", master=args.master)
    spark = session.get_or_create(settings)
    print(f"Spark {spark.version}, {spark.sparkContext.master}, {os.cpu_count()} CPUs; work in {work}")
    small = os.path.join(work, "small.csv")
    write_csv(small, args.small)
    prepare_table(small, "warm", label="label", overwrite=True, settings=settings, spark=spark)   # JVM warm-up
    plain_job(spark, small, os.path.join(work, "plain_warm"))

    smalls = []
    for _ in range(max(1, args.repeat)):
        started = time.perf_counter()
        prepare_table(small, "small", label="label", overwrite=True, settings=settings, spark=spark)
        smalls.append(time.perf_counter() - started)
    print(f"{args.small}-row table in the running session: {statistics.median(smalls):.2f} s "
          f"(median of {len(smalls)})")
    print(f"{'rows':>10} {'plain s':>8} {'plain rows/s':>13} {'hopsml s':>9} {'hopsml rows/s':>14} {'ratio':>6}")
    for rows in sizes:
        src = os.path.join(work, f"table_{rows}.csv")
        if not os.path.exists(src):
            write_csv(src, rows)
        plains, ours = [], []
        for _ in range(max(1, args.repeat)):
            started = time.perf_counter()
            plain_job(spark, src, os.path.join(work, f"plain_{rows}"))
            plains.append(time.perf_counter() - started)
            started = time.perf_counter()
            summary = prepare_table(src, f"t{rows}", label="label", overwrite=True, settings=settings, spark=spark)
            ours.append(time.perf_counter() - started)
            if summary.read != rows:
                raise SystemExit(f"read {summary.read} rows of {rows}: {summary}")
            shutil.rmtree(os.path.join(work, f"plain_{rows}"), ignore_errors=True)
        plain, mine = statistics.median(plains), statistics.median(ours)
        ratio = statistics.median(m / p for m, p in zip(ours, plains))
        print(f"{rows:>10} {plain:>8.2f} {rows / plain:>13,.0f} {mine:>9.2f} {rows / mine:>14,.0f} "
              f"{ratio:>6.2f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
