"""The online half of bench/feature_store.py (`--online`): feature vectors from hopsml's online store against Feast's
`get_online_features`, and a deployment that looks its features up against one that is given them. Its docstring
says what is measured and how; this module is imported by it, never by hopsml."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from hopsml import config
from hopsml.featurestore import online
from hopsml.featurestore.store import FeatureStore
from hopsml.hopsworks.hsfs.builtin_transformations import (
    label_encoder,
    min_max_scaler,
    one_hot_encoder,
    standard_scaler,
)

HERE = os.path.dirname(os.path.abspath(__file__))
FEAST_DRIVER = os.path.join(HERE, "feast_online.py")
FEATURES = ["x0", "x1", "x2", "n0", "n1", "city"]
SIDES = ("feast sqlite", "hopsml sqlite", "hopsml sqlite, no transform", "hopsml mariadb", "hopsml mariadb, pymysql")

sys.path.insert(0, HERE)
from feast_online import timed  # noqa: E402  (beside this file; standard library only)


def frame(keys: int, seed: int = 0) -> pd.DataFrame:
    """`keys` rows, one per key: three floats, two integers and a string, all at one event time."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"id": np.arange(keys, dtype=np.int64),
                         "ts": pd.Timestamp("2024-01-01", tz="UTC") + pd.to_timedelta(rng.integers(0, 86400, keys),
                                                                                       unit="s"),
                         "x0": rng.gamma(2.0, 30.0, keys), "x1": rng.random(keys), "x2": rng.normal(size=keys),
                         "n0": rng.integers(0, 1000, keys), "n1": rng.integers(0, 5, keys),
                         "city": rng.choice(["Stockholm", "Berlin", "Paris", "Madrid", "Rome"], keys)})


class Feast:
    """bench/feast_online.py in Feast's environment: materialized once, then asked for figures line by line."""

    def __init__(self, python: str, workdir: str, data_path: str) -> None:
        self.err = open(os.path.join(workdir, "stderr.txt"), "w+")
        self.proc = subprocess.Popen([python, FEAST_DRIVER, workdir, data_path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.materialize_s = float(self._answer()["materialize_s"])

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.err.seek(0)
            raise RuntimeError(f"Feast's driver exited ({self.proc.wait()}); its last output:\n"
                               f"{self.err.read()[-3000:]}")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


@contextlib.contextmanager
def mariadb(folder: str) -> Iterator[str | None]:
    """A MariaDB server of its own, started as the tests start one (tests/mariadb.py): its URL, or None where
    there is none (the reason printed)."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
    try:
        import pytest
        from mariadb import mariadb_server
    except ImportError as error:
        print(f"MariaDB skipped: {error}")
        yield None
        return
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(mariadb_server(pathlib.Path(folder)))
        except pytest.skip.Exception as skipped:
            print(f"MariaDB skipped: {skipped}")
            url = None
        yield url


def hopsml_view(root: str, project: str, online_store: str, rows: pd.DataFrame) -> tuple[Any, float]:
    """An online-enabled group of `rows`, a view over it with a min-max scaler and a label encoder, its training
    dataset version 1, ready to serve; and the insert's seconds (offline commit and online write)."""
    fs = FeatureStore(config.load(environ={}, root=root, project=project, online_store=online_store))
    group = fs.create_feature_group("g", primary_key=["id"], event_time="ts", online_enabled=True,
                                    statistics_config=False)
    began = time.perf_counter()
    group.insert(rows)
    seconds = time.perf_counter() - began
    view = fs.create_feature_view("vectors", query=group.select(FEATURES),
                                  transformation_functions=[min_max_scaler("x0"), label_encoder("city")])
    view.training_data()
    view.init_serving(1)
    return view, seconds


def same(ours: pd.DataFrame, theirs: dict[str, dict[str, Any]], keys: list[int]) -> bool:
    """Whether two sides gave the same untransformed values for `keys` (floats to 1e-12)."""
    for i, key in enumerate(keys):
        for name in FEATURES:
            a, b = ours[name].iloc[i], theirs[str(key)][name]
            a = a.item() if hasattr(a, "item") else a
            if isinstance(a, float) or isinstance(b, float):
                if not math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12):
                    return False
            elif a != b:
                return False
    return True


def as_values(view: Any, keys: list[int]) -> dict[str, dict[str, Any]]:
    found = view.get_feature_vectors([{"id": k} for k in keys], return_type="pandas", transform=False)
    return {str(k): {n: found[n].iloc[i] for n in FEATURES} for i, k in enumerate(keys)}


def run(args: argparse.Namespace) -> None:
    root = tempfile.mkdtemp(prefix="hopsml-bench-online-")
    try:
        measure_all(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_all(root: str, args: argparse.Namespace) -> None:
    keys = args.online_keys
    rows = frame(keys)
    data_path = os.path.join(root, "g.parquet")
    rows.to_parquet(data_path)
    rng = np.random.default_rng(1)
    calls = args.online_calls
    jobs = {1: [[int(k)] for k in rng.integers(0, keys, calls)],
            100: [[int(k) for k in rng.integers(0, keys, 100)] for _ in range(max(1, calls // 20))]}
    threads = [int(t) for t in args.online_threads.split(",")]
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {os.cpu_count()} cores")
    print(f"(c) online feature vectors: {keys:,} keys, {len(FEATURES)} features ({', '.join(FEATURES)}); "
          f"{len(jobs[1]):,} single calls and {len(jobs[100]):,} calls of 100 keys per case, at {threads} callers "
          f"(threads of one process); median of {args.repeat} rounds")
    feast = None
    workdir = os.path.join(root, "feast")
    os.makedirs(workdir)
    if args.feast_version:
        feast = Feast(args.feast_python, workdir, data_path)   # materialized before hopsml's inserts
    else:
        print("Feast skipped: no Feast in --feast-python / $HOPSML_BENCH_FEAST_PYTHON "
              f"({args.feast_python or 'unset'})")
    views: dict[str, Any] = {}
    with mariadb(os.path.join(root, "mariadb")) as url:
        try:
            served, seconds = hopsml_view(root, "online", "", rows)
            print(f"hopsml insert of {keys:,} rows into an online-enabled group (offline commit + SQLite): "
                  f"{seconds:.2f} s")
            views.update({"hopsml sqlite": served, "hopsml sqlite, no transform": served})
            if url:
                views["hopsml mariadb"], seconds = hopsml_view(root, "onlinemdb", url, rows)
                driver = online.mysql_driver().__name__
                print(f"hopsml insert of {keys:,} rows (offline commit + MariaDB, {driver}): {seconds:.2f} s")
                if driver != "pymysql":   # the pure-Python driver too, on the same table
                    fs = FeatureStore(config.load(environ={}, root=root, project="onlinemdb",
                                                  online_store=f"{url}?driver=pymysql"))
                    views["hopsml mariadb, pymysql"] = fs.get_feature_view("vectors", 1)
                    views["hopsml mariadb, pymysql"].init_serving(1)
            if feast:
                print(f"Feast {args.feast_version}: materialize of {keys:,} rows into its SQLite store: "
                      f"{feast.materialize_s:.2f} s")
            check(views, feast, rows)
            figures = rounds(views, feast, jobs, threads, args.repeat)
            report(figures, jobs, threads, [s for s in SIDES if s in views or (s.startswith("feast") and feast)])
            bare_lookups(views, rows)
            numpy_against_list(root, rows)
            print(f"load average after the vectors: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        finally:
            if feast:
                feast.close()
            for side in ("hopsml mariadb", "hopsml mariadb, pymysql"):
                if side in views:
                    views[side].store.online().close()
    if not args.no_e2e:
        end_to_end(root, views["hopsml sqlite"], args)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def numpy_against_list(root: str, rows: pd.DataFrame, calls: int = 2000) -> None:
    """`return_type="numpy"` against "list" with the built-in transformations, a one-hot encoder among them (its
    booleans once sent numpy vectors through pandas): median and p99 per call for 1 and 100 keys, the vectors'
    dtype, and the ratio numpy/list (target: at most 2)."""
    fs = FeatureStore(config.load(environ={}, root=root, project="online"))
    view = fs.create_feature_view("onehot", query=fs.get_feature_group("g", 1).select(FEATURES),
                                  transformation_functions=[min_max_scaler("x0"), standard_scaler("x1"),
                                                            one_hot_encoder("city")])
    view.training_data()
    view.init_serving(1)
    rng = np.random.default_rng(4)
    print(f"numpy against list vectors, built-in transformations with a one-hot encoder; {calls:,} calls each:")
    for size in (1, 100):
        jobs = [[{"id": int(k)} for k in rng.integers(0, len(rows), size)] for _ in range(calls)]
        figures = {}
        for kind in ("list", "numpy", "list", "numpy"):   # each twice, taking turns; the second round counts
            times = []
            for job in jobs:
                began = time.perf_counter()
                answer = view.get_feature_vectors(job, return_type=kind)
                times.append((time.perf_counter() - began) * 1000.0)
            times.sort()
            figures[kind] = (times[len(times) // 2], times[int(len(times) * 0.99)], answer)
        array = figures["numpy"][2]
        print(f"  {size:>3} keys: list p50 {figures['list'][0]:.3f} ms p99 {figures['list'][1]:.3f} ms; numpy p50 "
              f"{figures['numpy'][0]:.3f} ms p99 {figures['numpy'][1]:.3f} ms ({array.dtype}, shape {array.shape}); "
              f"ratio numpy/list p50 {figures['numpy'][0] / figures['list'][0]:.2f}")


def bare_lookups(views: dict[str, Any], rows: pd.DataFrame, lookups: int = 3000) -> None:
    """The floor under a networked store: one primary-key SELECT of one row, alone, on each store's table (the
    same connection the vectors use), against SQLite's in-process lookup; median and p99 of `lookups`."""
    rng = np.random.default_rng(3)
    keys = [int(k) for k in rng.integers(0, len(rows), lookups)]
    print(f"bare primary-key SELECT of one row, {lookups:,} lookups (the round trip under every vector):")
    for side in ("hopsml sqlite", "hopsml mariadb", "hopsml mariadb, pymysql"):
        if side not in views:
            continue
        store = views[side].store.online()
        table = online.table_name(views[side].query.left)
        cursor = store.connection().cursor()
        sql = f"SELECT * FROM {store._q(table)} WHERE {store._q('id')} = {store._mark()}"
        times = []
        for key in keys:
            began = time.perf_counter()
            cursor.execute(sql, (key,))
            cursor.fetchall()
            times.append((time.perf_counter() - began) * 1000.0)
        cursor.close()
        times.sort()
        print(f"  {side:<28} p50 {times[len(times) // 2]:.3f} ms  p99 {times[int(len(times) * 0.99)]:.3f} ms")


def check(views: dict[str, Any], feast: Feast | None, rows: pd.DataFrame) -> None:
    """The same values on every side, for 200 sampled keys (untransformed; Feast has no transformations)."""
    sample = [int(k) for k in np.random.default_rng(2).choice(len(rows), 200, replace=False)]
    ours = as_values(views["hopsml sqlite"], sample)
    found = rows.set_index("id").loc[sample, FEATURES].reset_index(drop=True)
    print(f"same values as the inserted rows, 200 sampled keys: hopsml sqlite {same(found, ours, sample)}", end="")
    if "hopsml mariadb" in views:
        print(f", hopsml mariadb {same(found, as_values(views['hopsml mariadb'], sample), sample)}", end="")
    if feast:
        print(f", Feast {same(found, feast.ask({'sample': sample})['values'], sample)}", end="")
    print()


def rounds(views: dict[str, Any], feast: Feast | None, jobs: dict[int, list[list[int]]], threads: list[int],
           repeat: int) -> dict[tuple[int, int, str], dict[str, float]]:
    """Every case `repeat` times, the sides taking turns within each round; the median of each figure."""
    runs: dict[tuple[int, int, str], list[dict[str, float]]] = {}
    for _ in range(repeat):
        for n in threads:
            for size, work in jobs.items():
                warm = 20 if size == 1 else 2
                for side in SIDES:
                    if side.startswith("feast"):
                        if feast is None:
                            continue
                        figures = feast.ask({"keys": work, "threads": n, "warm": warm})
                    elif side in views:
                        figures = timed(lookup(views[side], size, "no transform" not in side), work, n, warm)
                    else:
                        continue
                    runs.setdefault((size, n, side), []).append(figures)
    return {case: {name: statistics.median(r[name] for r in done) for name in done[0]}
            for case, done in runs.items()}


def lookup(view: Any, size: int, transform: bool) -> Callable[[list[int]], Any]:
    if size == 1:
        return lambda job: view.get_feature_vector({"id": job[0]}, transform=transform)
    return lambda job: view.get_feature_vectors([{"id": k} for k in job], transform=transform)


def report(figures: dict[tuple[int, int, str], dict[str, float]], jobs: dict[int, list[list[int]]],
           threads: list[int], sides: list[str]) -> None:
    print(f"{'keys/call':>9} {'callers':>7}  {'side':<28} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>9} "
          f"{'vectors/s':>10}")
    for size in jobs:
        for n in threads:
            for side in sides:
                f = figures.get((size, n, side))
                if f:
                    print(f"{size:>9} {n:>7}  {side:<28} {f['p50_ms']:>8.3f} {f['p99_ms']:>8.3f} "
                          f"{f['calls_per_s']:>9,.0f} {f['vectors_per_s']:>10,.0f}")
    print("ratios (targets: Feast p99 / hopsml sqlite p99 >= 3 at 1 and 100 keys; MariaDB within 2x of SQLite)")
    print(f"{'keys/call':>9} {'callers':>7}  {'feast/sqlite p99':>16} {'p50':>6} {'vectors/s':>10}   "
          f"{'mariadb/sqlite p99':>18} {'p50':>6} {'vectors/s':>10}")
    for size in jobs:
        for n in threads:
            ours = figures.get((size, n, "hopsml sqlite"))
            feast, maria = figures.get((size, n, "feast sqlite")), figures.get((size, n, "hopsml mariadb"))
            if not ours:
                continue

            def ratio(other: dict[str, float] | None, mine: dict[str, float], width: int) -> str:
                if not other:
                    return f"{'-':>{width}} {'-':>6} {'-':>10}"
                return (f"{other['p99_ms'] / mine['p99_ms']:>{width}.2f} {other['p50_ms'] / mine['p50_ms']:>6.2f} "
                        f"{mine['vectors_per_s'] / other['vectors_per_s']:>9.2f}x")

            print(f"{size:>9} {n:>7}  {ratio(feast, ours, 16)}   {ratio(maria, ours, 18)}")
    print("(feast/sqlite: Feast's figure over hopsml's, so above 1 is hopsml faster; vectors/s: hopsml's over the "
          "other's; mariadb/sqlite: MariaDB's latency over SQLite's, SQLite's throughput over MariaDB's)")


PREDICT_LOOKUP = textwrap.dedent("""
    import os

    import joblib

    from hopsml import hopsworks


    class Predict:
        def __init__(self):
            project = hopsworks.login()
            self.fv = project.get_feature_store().get_feature_view("vectors", 1)
            self.fv.init_serving(1)
            self.model = joblib.load(os.path.join(os.environ["MODEL_FILES_PATH"], "model.joblib"))

        def predict(self, inputs):
            vectors = self.fv.get_feature_vectors([{"id": int(row[0])} for row in inputs], return_type="numpy")
            return self.model.predict(vectors).tolist()
""")

PREDICT_PASSED = textwrap.dedent("""
    import os

    import joblib
    import numpy as np


    class Predict:
        def __init__(self):
            self.model = joblib.load(os.path.join(os.environ["MODEL_FILES_PATH"], "model.joblib"))

        def predict(self, inputs):
            return self.model.predict(np.asarray(inputs, dtype=float)).tolist()
""")


def end_to_end(root: str, view: Any, args: argparse.Namespace) -> None:
    """(d) The same model deployed twice: its predictor looking the request's key up in the online store, and
    given the (transformed) vector in the request; `--e2e-clients` keep-alive clients, as bench/serving.py loads."""
    import joblib
    from serving import Target, measure, post, server_pid
    from sklearn.linear_model import LinearRegression

    from hopsml import hopsworks
    from hopsml.hopsworks.deployments import Resources
    from hopsml.serving.control import lifecycle

    os.environ["HOPSML_ROOT"] = root
    project = hopsworks.login(project="online")
    settings = config.load(environ={}, root=root, project="online")
    features, _ = view.get_training_data(1)
    x = features.to_numpy(dtype=float)
    model_dir = os.path.join(root, "model")
    os.makedirs(model_dir)
    fitted = LinearRegression().fit(x, x @ np.linspace(0.5, 2.0, x.shape[1]))
    joblib.dump(fitted, os.path.join(model_dir, "model.joblib"))
    model = project.get_model_registry().sklearn.create_model("vectors", feature_view=view,
                                                              training_dataset_version=1)
    model.save(model_dir)
    key = args.online_keys // 3
    vector = view.get_feature_vector({"id": key})
    deployments, targets = [], []
    try:
        for name, script, body in (("lookup", PREDICT_LOOKUP, {"instances": [[key]]}),
                                   ("passed", PREDICT_PASSED, {"instances": [vector]})):
            path = os.path.join(root, f"predict_{name}.py")
            with open(path, "w") as f:
                f.write(script)
            deployment = model.deploy(name=name, script_file=path, resources=Resources(num_instances=1))
            deployment.start(await_running=300)
            deployments.append(deployment)
            answer = deployment.predict(data=body)["predictions"]
            serving = lifecycle.get(name, settings)
            raw = json.dumps(body).encode()
            targets.append(Target(f"hopsml {name}", serving.internal_ips[0], int(serving.internal_port or 0),
                                  post(f"/v1/models/{name}:predict", raw), raw, server_pid(settings, name)))
            print(f"deployment {name!r}: prediction {answer[0]:.6f} for key {key}")
        expected = float(fitted.predict(np.asarray([vector], dtype=float))[0])
        clients = [int(c) for c in args.e2e_clients.split(",")]
        print(f"(d) end to end, {args.e2e_clients} clients, one key per request (the same request over and over), "
              f"{args.e2e_seconds:g} s per run, the two deployments taking turns, median of {args.repeat}; the "
              f"model's answer {expected:.6f}")
        loads = measure(targets, clients, args.e2e_seconds, args.repeat)
        for n in clients:
            looked, passed = loads["hopsml lookup"][n], loads["hopsml passed"][n]
            print(f"lookup's cost per request at {n} clients: {looked.p50_ms - passed.p50_ms:.3f} ms of median "
                  f"latency ({looked.p50_ms:.2f} against {passed.p50_ms:.2f} ms; p99 {looked.p99_ms:.2f} against "
                  f"{passed.p99_ms:.2f}), {looked.cpu_ms - passed.cpu_ms:.3f} ms of server CPU ({looked.cpu_ms:.3f} "
                  f"against {passed.cpu_ms:.3f}); {looked.rps:.0f} against {passed.rps:.0f} req/s "
                  f"({looked.rps / passed.rps:.2f}x)")
    finally:
        for deployment in deployments:
            deployment.stop()
