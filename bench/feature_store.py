"""Point-in-time training data and inserts of the feature store, and (`--online`) feature vectors from the online
store, against the plain ways and Feast, side by side in one run.

    python bench/feature_store.py [--labels 10000,100000,1000000] [--groups 3] [--features 2] [--ratio 10]
                                  [--repeat 3] [--master local[*]] [--engines duckdb,spark,plain] [--no-inserts]
                                  [--feast-python PATH] [--feast-limit 900] [--feast-memory-gib 7]
    python bench/feature_store.py --wide [--labels 1000000] [--engines duckdb,spark,plain] ...
    python bench/feature_store.py --online [--online-keys 100000] [--online-calls 10000] [--online-threads 1,16]
                                  [--repeat 3] [--feast-python PATH] [--e2e-clients 1,64] [--e2e-seconds 5] [--no-e2e]

(a) Point-in-time training data: `--labels` label rows (a key and an event time) joined with `--groups` feature
groups holding `--ratio` times as many rows in all, each label row getting each group's newest row of its key
at or before its time. Timed, each on the same data and the same Spark session, the answer collected to pandas:

* duckdb: hopsml's embedded engine (`read_options={"engine": "duckdb"}`: one ASOF JOIN per group over the groups'
  Parquet files, the rows put together in Arrow);
* spark: hopsml's Spark engine (each group's Parquet files; Spark's sort-merge as-of join where this Spark has one,
  else a join on the key and time, newest match kept);
* plain: the PySpark join written the common way: union the label rows with the group's rows, and take the last
  non-null value of each feature over a window ordered by time (`last(..., ignorenulls=True)`), per group.

The three answers are compared (the same rows, the same values). Prints seconds of each, DuckDB's label rows/s
and the CPU seconds of the bench process while DuckDB ran (its threads run there; other users of a shared machine
move it less than wall time), the 1-minute load average after each engine's runs, and the ratios spark/plain
(target: at most 1.25) and duckdb/spark (target: under 1 below 10M rows); DuckDB's target: 1M label rows/s at
1M labels x 3 groups of 10M rows in all on 2 cores.

`--wide` is the shape of the published comparisons: 1M label rows (entities), 25 groups of 10 features each (250
features), each group as many rows as there are label rows (target: DuckDB within 60 s on 2 cores).

* feast: Feast's local offline store (provider local, the file/Dask store) on the same rows written as Parquet,
  `get_historical_features(...).to_df()` timed by bench/feast_pit.py in the environment of `--feast-python`
  (default: $HOPSML_BENCH_FEAST_PYTHON; Feast is no hopsml dependency, so its column is skipped without it), each
  call in its own process capped at `--feast-memory-gib` of address space and `--feast-limit` seconds, a breach
  printed as "out of memory at N GiB" or "> S s". Prints feast/duckdb and feast/spark (target: at least 5 at 1M
  label rows). Both sides take a group row whose time equals the label's (`<=`) and compare times in UTC; Feast's
  file store leaves out a label row that has rows of its key in a group but none at or before its time, where
  hopsml keeps it with nulls, so its answer is checked against hopsml's rows without nulls and the rows it left
  out are counted. Feast is handed the label rows in memory (read before its timer), hopsml reads its label group.

The figures in docs/benchmarks.md:

    python3 -m venv venv-feast && venv-feast/bin/pip install feast==0.67.0
    export HOPSML_BENCH_FEAST_PYTHON=venv-feast/bin/python
    python bench/feature_store.py --labels 10000,100000 --repeat 3 --master "local[2]"
    python bench/feature_store.py --labels 300000 --repeat 1 --master "local[2]"
    python bench/feature_store.py --labels 1000000 --repeat 1 --master "local[2]"
    python bench/feature_store.py --labels 1000000 --repeat 3 --master "local[2]" --no-inserts
    python bench/feature_store.py --wide --engines duckdb --repeat 1 --master "local[2]"

(b) Inserts: `--labels` rows of 8 columns from pandas into a new group (one commit, statistics included), against
writing the same rows as one Parquet file with pyarrow; and the same rows as a Spark DataFrame (cached, so the
source is not timed) inserted by Spark's tasks (checks and statistics as Spark jobs), against Spark writing them
as plain Parquet (`df.write.parquet`). Prints rows/s of each and the ratios (insert time / plain time).

With `--repeat N` every timing is the median of N runs (a shared machine's speed drifts).

With `--online` only the online part runs (bench/feature_store_online.py), no Spark:

(c) Feature vectors: `--online-keys` keys of one group (three floats, two integers, a string) inserted into an
online-enabled group (the offline commit and the online write) and materialized by Feast 0.67 into its SQLite
online store (provider local; bench/feast_online.py in the environment of `--feast-python`, a process of its own
answering requests on stdin). Timed on the same key sequences, each side alike (`feast_online.timed`: the calls
spread over 1 and 16 threads of one process, each thread's first calls untimed): `--online-calls` single lookups
and a twentieth as many of 100 keys each, by

* Feast: `store.get_online_features(features=[...], entity_rows=[{"id": k}, ...]).to_dict()`;
* hopsml sqlite: `fv.init_serving(1)`, then `fv.get_feature_vector({"id": k})` and `fv.get_feature_vectors([...])`
  (return_type "list", a min-max scaler and a label encoder fitted on training dataset version 1 applied; the
  default `online_store`, SQLite in the project), and the same with `transform=False`;
* hopsml mariadb: the same on a MariaDB server started for the run as the tests start one (tests/mariadb.py;
  skipped, saying so, where MariaDB is not installed), `online_store=mysql://...`.

The untransformed values of 200 sampled keys are compared with the inserted rows on every side first. Prints p50
and p99 latency, calls/s and vectors/s per case (median of `--repeat` rounds, the sides taking turns in each),
and the ratios Feast / hopsml sqlite and MariaDB / SQLite (targets: Feast's p99 at least 3x hopsml's at 1 and
100 keys; MariaDB within 2x of SQLite).

(d) End to end (unless `--no-e2e`): a linear model trained on the view's training dataset, deployed twice as hsml
deploys (`model.deploy(script_file=...)`): a predictor that looks the request's key up with
`fv.get_feature_vectors(..., return_type="numpy")`, and one that is given the transformed vector in the request.
Loaded by 1 and 64 keep-alive clients (`--e2e-clients`; bench/serving.py's client and `measure`: the two take
turns, median of `--repeat` runs of `--e2e-seconds`), one key per request, the same request over and over. Prints
req/s, p50/p99 and the server's CPU per request of each, and the lookup's cost per request (the difference of
the medians, and of the CPU per request).

The figures in docs/benchmarks.md:

    python bench/feature_store.py --online --repeat 3 --feast-python venv-feast/bin/python
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from hopsml import config
from hopsml.cluster import session
from hopsml.featurestore.store import FeatureStore

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
FEAST_DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "feast_pit.py")


def frames(labels: int, groups: int, ratio: int, seed: int = 0, features: int = 2
           ) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """Label rows and `groups` groups of `features` float features each, `ratio` group rows per label row in all."""
    rng = np.random.default_rng(seed)
    keys = max(10, labels // 20)

    def timed_rows(count: int) -> tuple[np.ndarray, pd.Series]:
        # distinct (key, time) pairs: times unique per row
        seconds = rng.permutation(np.arange(count, dtype=np.int64) * 7 + 1)
        return rng.integers(0, keys, count), pd.to_datetime(seconds, unit="s", utc=True) + pd.Timedelta(days=1)

    key, ts = timed_rows(labels)
    label = pd.DataFrame({"id": key, "ts": ts, "y": rng.integers(0, 2, labels)})
    out = []
    for g in range(groups):
        count = labels * ratio // groups
        key, ts = timed_rows(count)
        names = [f"f{g}a", f"f{g}b"] if features == 2 else [f"f{g}_{i}" for i in range(features)]
        out.append(pd.DataFrame({"id": key, "ts": ts, **{name: rng.random(count) for name in names}}))
    return label, out


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    return median_times(fn, repeat)[:2]


def median_times(fn: Callable[[], Any], repeat: int) -> tuple[float, Any, float]:
    """The median wall seconds, the last answer, and the median CPU seconds of this process (all its threads:
    DuckDB's work, not Spark's, which runs in the JVM), a figure the other users of a shared machine move less."""
    times, cpu, result = [], [], None
    for _ in range(repeat):
        began, began_cpu = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    return statistics.median(times), result, statistics.median(cpu)


def plain_spark(spark: Any, label_path: str, group_paths: list[str]) -> pd.DataFrame:
    """The common PySpark way: per group, union with the label rows, last non-null value over a time window."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out = spark.read.parquet(label_path).withColumn("_row", F.monotonically_increasing_id())
    for path in group_paths:
        group = spark.read.parquet(path)
        features = [c for c in group.columns if c not in ("id", "ts")]
        left = out.select("_row", "id", "ts", *[F.lit(None).cast("double").alias(c) for c in features],
                          F.lit(1).alias("_is_label"))
        right = group.select(F.lit(None).cast("long").alias("_row"), "id", "ts", *features,
                             F.lit(0).alias("_is_label"))
        window = Window.partitionBy("id").orderBy("ts", "_is_label").rowsBetween(Window.unboundedPreceding, 0)
        filled = left.unionByName(right).select(
            "_row", "_is_label", *[F.last(c, ignorenulls=True).over(window).alias(c) for c in features])
        out = out.join(filled.where("_is_label = 1").drop("_is_label"), "_row")
    return out.drop("_row").toPandas()


def same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    columns = sorted(a.columns)
    left = a[columns].sort_values(["id", "ts"]).reset_index(drop=True)
    right = b[sorted(b.columns)].sort_values(["id", "ts"]).reset_index(drop=True)
    if len(left) != len(right):
        return False
    left["ts"], right["ts"] = pd.to_datetime(left["ts"], utc=True), pd.to_datetime(right["ts"], utc=True)
    return bool(np.allclose(left.drop(columns=["ts"]).to_numpy(dtype=float),
                            right.drop(columns=["ts"]).to_numpy(dtype=float), equal_nan=True)
                and (left["ts"] == right["ts"]).all())


def feast_version(python: str | None) -> str | None:
    """Feast's version in that environment, or None when it has none (the Feast column is then skipped)."""
    if not python or not os.path.exists(python):
        return None
    done = subprocess.run([python, "-c", "import feast; print(feast.__version__)"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def feast_once(root: str, label_path: str, group_paths: list[str], args: argparse.Namespace
               ) -> tuple[float | str, float, pd.DataFrame | None]:
    """One Feast call in a process of its own, capped, so running out of memory or time is a figure, not a crash."""
    workdir = tempfile.mkdtemp(dir=root, prefix="feast-")
    out = os.path.join(workdir, "answer.parquet")
    cap = int(args.feast_memory_gib * 2**30)
    with open(os.path.join(workdir, "stderr.txt"), "w+") as err:
        # prlimit, not preexec_fn: forking a process that runs Py4J threads must not run Python before exec
        proc = subprocess.Popen(["prlimit", f"--as={cap}", args.feast_python, FEAST_DRIVER, workdir, label_path,
                                 out, *group_paths], stdout=subprocess.PIPE, stderr=err, text=True)
        proc.stdout.readline()  # "ready": Feast imported and the repository applied; the limit counts from here
        try:
            stdout, _ = proc.communicate(timeout=args.feast_limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return f"> {args.feast_limit:g} s", 0.0, None
        err.seek(0)
        tail = err.read()[-3000:]
    if proc.returncode == 0:
        seconds, peak_gib = stdout.split()[-2:]
        return float(seconds), float(peak_gib), pd.read_parquet(out)
    if proc.returncode == 3 or any(m in tail for m in ("MemoryError", "bad_alloc", "Cannot allocate memory")):
        return f"out of memory at {args.feast_memory_gib:g} GiB", 0.0, None
    print(f"Feast failed (exit {proc.returncode}); its last output:\n{tail}", file=sys.stderr)
    return f"failed ({proc.returncode})", 0.0, None


def feast(root: str, label_path: str, group_paths: list[str], args: argparse.Namespace
          ) -> tuple[float | str, float, pd.DataFrame | None]:
    """Feast's median of --repeat calls and its largest peak; the first call over a cap ends the row."""
    times, peaks, answer = [], [], None
    for _ in range(args.repeat):
        seconds, peak_gib, answer = feast_once(root, label_path, group_paths, args)
        if isinstance(seconds, str):
            return seconds, 0.0, None
        times.append(seconds)
        peaks.append(peak_gib)
    return statistics.median(times), max(peaks), answer


def point_in_time(spark: Any, root: str, labels: int, args: argparse.Namespace, engines: list[str]) -> str:
    """One row of (a): the same training data by each engine, timed, and whether they agree."""
    fs = FeatureStore(config.load(environ={}, root=root, project=f"bench{labels}", master=args.master))
    label, groups = frames(labels, args.groups, args.ratio, features=args.features)
    label_group = fs.create_feature_group("label", primary_key=["id"], event_time="ts", statistics_config=False)
    label_group.insert(label)
    query = label_group.select_all()
    group_paths = []
    for g, frame in enumerate(groups):
        group = fs.create_feature_group(f"g{g}", primary_key=["id"], event_time="ts", statistics_config=False)
        group.insert(frame)
        query = query.join(group.select([c for c in frame.columns if c not in ("id", "ts")]))
        path = os.path.join(root, f"plain-{labels}-{g}.parquet")
        frame.to_parquet(path)
        group_paths.append(path)
    label_path = os.path.join(root, f"plain-{labels}-label.parquet")
    label.to_parquet(label_path)
    seconds, answers, loads, cpu = {}, {}, [], {}
    for engine in engines:
        run = (functools.partial(plain_spark, spark, label_path, group_paths) if engine == "plain"
               else functools.partial(query.read, read_options={"engine": engine}))
        seconds[engine], answers[engine], cpu[engine] = median_times(run, args.repeat)
        loads.append(f"{os.getloadavg()[0]:.1f}")   # the machine's 1-minute load right after this engine's runs
    agree = all(same(answers[engines[0]], answers[e]) for e in engines[1:])
    feast_seconds, feast_same, left_out = "skipped", "-", "-"
    if args.feast_version:
        feast_seconds, peak_gib, theirs = feast(root, label_path, group_paths, args)
        if theirs is not None:
            seconds["feast"] = feast_seconds
            ours = answers[engines[0]]
            feast_same, left_out = str(same(ours.dropna(), theirs)), str(len(ours) - len(theirs))

    over_limit = isinstance(feast_seconds, str) and feast_seconds.startswith(">")
    if over_limit:
        seconds["feast"] = args.feast_limit

    def ratio(a: str, b: str) -> str:
        bound = ">" if a == "feast" and over_limit else ""
        return f"{bound}{seconds[a] / seconds[b]:.2f}" if a in seconds and b in seconds else "-"

    if isinstance(feast_seconds, float):
        feast_seconds = f"{feast_seconds:.2f} (peak {peak_gib:.1f} GiB)"
    rate = f"{labels / seconds['duckdb']:,.0f} ({cpu['duckdb']:.1f})" if "duckdb" in seconds else "-"
    return (f"{labels:>9} {labels * args.ratio:>11} " + " ".join(f"{seconds[e]:>9.2f}" for e in engines)
            + f" {rate:>22} {'/'.join(loads):>14}"
            + f" {ratio('spark', 'plain'):>12} {ratio('duckdb', 'spark'):>13} {str(agree):>5}"
            + f" {ratio('feast', 'duckdb'):>13} {ratio('feast', 'spark'):>12} {feast_same:>11} {left_out:>9}"
            + f" {feast_seconds}")


def inserts(spark: Any, root: str, rows: int, args: argparse.Namespace) -> str:
    """One row of (b): a new group's first insert against plain Parquet, from pandas and from Spark."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"id": np.arange(rows), "ts": pd.to_datetime(np.arange(rows), unit="s", utc=True),
                          **{f"x{i}": rng.random(rows) for i in range(6)}})
    fs = FeatureStore(config.load(environ={}, root=root, project=f"insert{rows}", master=args.master))
    count = iter(range(1_000_000))

    def insert() -> None:
        fs.create_feature_group(f"t{next(count)}", primary_key=["id"], event_time="ts").insert(frame)

    def parquet() -> None:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False),
                       os.path.join(root, f"plain-insert-{rows}.parquet"))

    ours, _ = median_time(insert, args.repeat)
    theirs, _ = median_time(parquet, args.repeat)
    spark_frame = spark.createDataFrame(frame).repartition(2).cache()
    spark_frame.count()

    def spark_insert() -> None:
        fs.create_feature_group(f"t{next(count)}", primary_key=["id"], event_time="ts").insert(spark_frame)

    def spark_parquet() -> None:
        spark_frame.write.mode("overwrite").parquet(os.path.join(root, f"plain-spark-{rows}"))

    by_spark, _ = median_time(spark_insert, args.repeat)
    plain_spark, _ = median_time(spark_parquet, args.repeat)
    spark_frame.unpersist()
    return (f"{rows:>9} {rows / ours:>14,.0f} {rows / theirs:>15,.0f} {ours / theirs:>6.2f}"
            f" {rows / by_spark:>14,.0f} {rows / plain_spark:>15,.0f} {by_spark / plain_spark:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", default="10000,100000,1000000")
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--ratio", type=int, default=10, help="feature-group rows in all per label row")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--engines", default="duckdb,spark,plain")
    parser.add_argument("--features", type=int, default=2, help="float features per group")
    parser.add_argument("--wide", action="store_true",
                        help="the wide shape: --groups 25 --features 10 --ratio 25 (a group as many rows as labels), "
                             "--labels 1000000 unless given, no inserts")
    parser.add_argument("--no-inserts", action="store_true", help="leave out (b), the inserts")
    parser.add_argument("--feast-python", default=os.environ.get("HOPSML_BENCH_FEAST_PYTHON"),
                        help="python of an environment with Feast (default: $HOPSML_BENCH_FEAST_PYTHON)")
    parser.add_argument("--feast-limit", type=float, default=900, help="seconds one Feast call may take")
    parser.add_argument("--feast-memory-gib", type=float, default=7, help="address space a Feast call may take")
    parser.add_argument("--online", action="store_true", help="only the online part: (c) and (d)")
    parser.add_argument("--online-keys", type=int, default=100_000)
    parser.add_argument("--online-calls", type=int, default=10_000,
                        help="single lookups per case; a twentieth as many calls of 100 keys")
    parser.add_argument("--online-threads", default="1,16", help="concurrent callers")
    parser.add_argument("--e2e-clients", default="1,64", help="concurrent clients of the deployments")
    parser.add_argument("--e2e-seconds", type=float, default=5.0)
    parser.add_argument("--no-e2e", action="store_true", help="leave out (d), the deployments")
    args = parser.parse_args()
    if args.wide:
        args.groups, args.features, args.ratio, args.no_inserts = 25, 10, 25, True
        if "--labels" not in sys.argv:
            args.labels = "1000000"
    args.feast_version = feast_version(args.feast_python)
    if args.online:
        from feature_store_online import run

        run(args)
        return
    engines = args.engines.split(",")
    sizes = [int(n) for n in args.labels.split(",")]
    root = tempfile.mkdtemp(prefix="hopsml-bench-fs-")
    spark = session.get_or_create(config.load(environ={}, root=root, project="bench", master=args.master))
    print(f"load average before: {os.getloadavg()[0]:.1f}; Spark {spark.version} on {args.master}")
    print(f"Feast {args.feast_version} ({args.feast_python}), each call capped at {args.feast_memory_gib:g} GiB and "
          f"{args.feast_limit:g} s" if args.feast_version else
          f"Feast skipped: no Feast in --feast-python / $HOPSML_BENCH_FEAST_PYTHON ({args.feast_python or 'unset'})")
    print("(a) point-in-time training data")
    print(f"groups: {args.groups} of {args.features} features each; each time the median of {args.repeat} runs")
    print(f"{'labels':>9} {'group rows':>11} " + " ".join(f"{e + ' s':>9}" for e in engines)
          + f" {'duckdb rows/s (cpu s)':>22} {'load ' + '/'.join(e[0] for e in engines):>14}"
          + f" {'spark/plain':>12} {'duckdb/spark':>13} {'same':>5}"
          + f" {'feast/duckdb':>13} {'feast/spark':>12} {'feast same':>11} {'left out':>9} feast s")
    for labels in sizes:
        print(point_in_time(spark, root, labels, args, engines), flush=True)
    if args.no_inserts:
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        return
    print("(b) inserts, one commit, from pandas against pyarrow writing one Parquet file, and from Spark against "
          "Spark writing Parquet")
    print(f"{'rows':>9} {'pandas rows/s':>14} {'pyarrow rows/s':>15} {'ratio':>6} {'Spark rows/s':>14} "
          f"{'plain rows/s':>15} {'ratio':>6}")
    for rows in sizes:
        print(inserts(spark, root, rows, args), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
