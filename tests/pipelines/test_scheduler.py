"""The generated retraining DAG under Airflow's own services, not dag.test(): the execution API server, the dag
processor and the scheduler (LocalExecutor, SQLite metadata) run as subprocesses of this test. A commit to the
upstream feature group, made by a feeder DAG's FeatureGroupInsertOperator (triggered with `airflow dags
trigger`), is an event on the group's Asset; the scheduler queues the asset-scheduled retraining DAG on it, runs
it to the end (new training dataset -> train -> export -> canary -> the canary's requests -> gate -> rollout ->
check), and the serving answers on the promoted version. Every wait is bounded and says what it waited for;
every process the test started is ended, also when it fails."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow.sdk")   # the provider runs where the airflow extra is installed

from conftest import airflow, airflow_env, dags_folder

from hopsml.serving import InferenceLog
from hopsml.serving.control import canary, lifecycle

pytestmark = pytest.mark.slow

SERVING = "schedwages"
DAG_ID = "retrain_schedwages"
FEEDER_ID = "schedwages_in"
START_S = 180.0        # the services up and both DAGs parsed
RUN_S = 600.0          # the feeder's commit to the retraining run's end (a Spark start and a training inside)

FEEDER = '''
import datetime as dt

from airflow.sdk import DAG

from hopsml.airflow import FeatureGroupInsertOperator

with DAG(FEEDER_ID, schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False) as dag:
    FeatureGroupInsertOperator(task_id="insert", name=SERVING, path=PATH)
'''


def _rows(first: int, count: int, seed: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    exper = rng.uniform(0, 20, count)
    hours = rng.normal(2000, 300, count).round(0)
    high = ((exper / 20 + (hours - 2000) / 1000 + rng.normal(0, 0.2, count)) > 0.5).astype(int)
    return pd.DataFrame({"nr": np.arange(first, first + count), "exper": exper, "hours": hours, "high": high})


class Services:
    """Airflow's api-server (execution API only, on a port the OS picks), dag processor and scheduler, each in a
    session of its own so that stopping it ends what it started (executor workers, task processes)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {**airflow_env(), "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                    "AIRFLOW__CORE__PARALLELISM": "2",          # a linear DAG and its feeder: two slots are plenty
                    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),   # the scheduler signs, the API checks
                    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300"}

    def start(self, name: str, *argv: str) -> None:
        with open(self.logs / f"{name}.log", "wb") as out:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "airflow", *argv], env=self.env,
                                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def tail(self, name: str, lines: int = 25) -> str:
        path = self.logs / f"{name}.log"
        text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
        return f"--- last lines of {name}:\n" + "\n".join(text)

    def tails(self) -> str:
        return "\n".join(self.tail(name) for name in self.procs)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"airflow {name} ended with {proc.returncode}\n{self.tail(name, 60)}")

    def up(self) -> None:
        self.start("api-server", "api-server", "--host", "127.0.0.1", "--port", "0", "--apps", "execution")
        found: list[str] = []

        def port() -> bool:
            self.check_alive()
            found[:] = re.findall(r"Uvicorn running on http://127\.0\.0\.1:(\d+)",
                                  (self.logs / "api-server.log").read_text(errors="replace"))
            return bool(found)

        wait_for("the execution API server to listen", port, 90, self.tails)
        self.env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"http://127.0.0.1:{found[0]}/execution/"
        self.start("dag-processor", "dag-processor")
        self.start("scheduler", "scheduler", "--skip-serve-logs")   # no log server on its fixed port

    def stop(self) -> None:
        """SIGTERM to each service's session, SIGKILL to what is left after a grace period."""
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)
            proc.wait(10)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)   # its own session: the pid is the group's id
    except ProcessLookupError:
        pass


def wait_for(what: str, done: Callable[[], Any], timeout_s: float, context: Callable[[], str],
             every_s: float = 0.5) -> Any:
    """Poll `done` until it returns something true; past `timeout_s` fail saying what was awaited and `context()`."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = done()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{context()}")
        time.sleep(every_s)


class Clients(threading.Thread):
    """A client of the serving: feature rows one at a time until stopped, each answer's status kept; a refused
    connection (which a restart would cost) is counted and tried again."""

    def __init__(self, settings: Any, rows: list[list[float]]) -> None:
        super().__init__(daemon=True)
        self.settings, self.rows = settings, rows
        self.statuses: list[int] = []
        self.refused = 0
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            s = lifecycle.get(SERVING, self.settings)
            if s.internal_port is None:
                self.refused += 1
                self.halt.wait(0.05)
                continue
            body = json.dumps({"instances": [self.rows[i % len(self.rows)]]}).encode()
            url = f"http://127.0.0.1:{s.internal_port}/v1/models/{SERVING}:predict"
            try:
                with urllib.request.urlopen(urllib.request.Request(url, body, method="POST"), timeout=30) as answer:
                    json.loads(answer.read())
                    self.statuses.append(answer.status)
            except urllib.error.HTTPError as exc:
                self.statuses.append(exc.code)
            except (urllib.error.URLError, OSError):
                self.refused += 1
            i += 1
            self.halt.wait(0.01)

    def stop(self) -> list[int]:
        self.halt.set()
        self.join(timeout=60)
        return self.statuses


def _dag_models() -> dict[str, Any]:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return {m.dag_id: (m.is_paused, m.is_stale) for m in session.scalars(select(DagModel))}


def _runs(dag_id: str) -> list[dict[str, Any]]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return [{"run_id": r.run_id, "state": str(r.state), "run_type": str(r.run_type),
                 "tasks": {ti.task_id: (str(ti.state), ti.try_number) for ti in r.get_task_instances(session=session)},
                 "events": [dict(e.extra or {}) for e in r.consumed_asset_events]}
                for r in session.scalars(select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id))]


def _task_log(dag_id: str, run_id: str, task_id: str) -> str:
    """The last lines of a task's log under AIRFLOW_HOME/logs (for the failure message)."""
    home = Path(os.environ["AIRFLOW_HOME"]) / "logs"
    found = sorted(home.glob(f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}/attempt=*.log"))
    if not found:
        return f"(no log of task {task_id})"
    return f"--- log of task {task_id}:\n" + "\n".join(found[-1].read_text(errors="replace").splitlines()[-40:])


def _cli(settings: Any, *argv: str) -> str:
    import argparse

    from hopsml.airflow import commands

    parser = argparse.ArgumentParser()
    commands.add_commands(parser.add_subparsers(dest="command"))
    return commands.run(parser.parse_args(["pipelines", *argv]), settings)


@pytest.fixture
def served(project):
    """Version 1 of model schedwages: trained by wage_model.train on the view's first training dataset (named in
    the experiment's arguments), exported with its lineage, served with inference logging; the clients' rows."""
    import wage_model

    from hopsml import experiment
    from hopsml.airflow import steps
    from hopsml.featurestore.store import FeatureStore

    settings = project
    store = FeatureStore(settings)
    group = store.create_feature_group(SERVING, primary_key=["nr"])
    group.insert(_rows(0, 200, seed=1))
    view = store.create_feature_view("schedview", query=group.select_except(["nr"]), labels=["high"])
    td, _ = view.create_train_test_split(test_size=0.25, seed=3)
    logdir, _ = experiment.launch(wage_model.train, {"dataset": view.training_dataset_name(td)}, name=SERVING,
                                  seed=7)
    steps.export_model(settings, SERVING, logdir.rstrip("/").rsplit("/", 1)[-1], model_file="model.joblib")
    x, _ = wage_model._split(view.training_dataset_name(td), "train")
    lifecycle.create_or_update(SERVING, f"Models/{SERVING}", "PYTHON", 1, inference_logging="ALL",
                               inference_log=InferenceLog(roll_seconds=1), settings=settings)
    lifecycle.start(SERVING, timeout_s=180, settings=settings)
    try:
        yield settings, x[:100].tolist()
    finally:
        lifecycle.stop(SERVING, settings=settings)


def test_a_commit_queues_the_retraining_dag_and_the_real_scheduler_runs_it_to_a_promoted_version(served, tmp_path):
    settings, rows = served
    _cli(settings, "dag", SERVING, "-o", str(dags_folder() / f"{DAG_ID}.py"), "--force", "--min-requests", "20",
         "--canary-percent", "50", "--poke-interval", "1", "--canary-timeout", "120", "--max-p99-ratio", "20")
    csv = tmp_path / "new_workers.csv"
    _rows(200, 100, seed=2).to_csv(csv, index=False)
    (dags_folder() / f"{FEEDER_ID}.py").write_text(FEEDER.replace("FEEDER_ID", repr(FEEDER_ID)).replace(
        "SERVING", repr(SERVING)).replace("PATH", repr(str(csv))))
    services = Services(tmp_path)
    clients = Clients(settings, rows)
    try:
        services.up()

        def parsed() -> bool:
            services.check_alive()
            models = _dag_models()
            return all(d in models and models[d] == (False, False) for d in (DAG_ID, FEEDER_ID))

        wait_for(f"the dag processor to parse {DAG_ID} and {FEEDER_ID} (unpaused)", parsed, START_S, services.tails)
        clients.start()
        done = airflow("dags", "trigger", FEEDER_ID, timeout_s=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

        def context() -> str:
            runs = _runs(FEEDER_ID) + _runs(DAG_ID)
            logs = [_task_log(DAG_ID if "training_dataset_schedview" in r["tasks"] else FEEDER_ID, r["run_id"], t)
                    for r in runs for t, (state, _) in r["tasks"].items()
                    if state in ("failed", "up_for_retry", "upstream_failed")]
            return json.dumps(runs, indent=1) + "\n" + "\n".join(logs) + "\n" + services.tails()

        def finished() -> dict[str, Any] | None:
            services.check_alive()
            for run in _runs(FEEDER_ID) + _runs(DAG_ID):
                stuck = {t: s for t, (s, _) in run["tasks"].items() if s in ("failed", "up_for_retry")}
                if run["state"] == "failed" or stuck:
                    raise AssertionError(f"a run failed: {run['run_id']} {stuck}\n{context()}")
            runs = _runs(DAG_ID)
            return runs[0] if runs and runs[0]["state"] == "success" else None

        run = wait_for(f"the commit to queue {DAG_ID} and the scheduler to run it to the end", finished, RUN_S,
                       context, every_s=2)
    finally:
        statuses = clients.stop()
        services.stop()
    assert run["run_type"] == "asset_triggered" and run["events"] == [{"commit": 1}], run
    assert all(state == "success" for state, _ in run["tasks"].values()), run["tasks"]
    assert len(run["tasks"]) == 8, run["tasks"]
    decision = canary.last_decision(SERVING, settings)
    assert decision is not None and (decision["decision"], decision["canary"]) == ("promoted", 2), decision
    after = lifecycle.get(SERVING, settings)
    assert (after.model_version, after.canary_version, str(after.status)) == (2, None, "Running")
    answer = lifecycle.make_inference_request(SERVING, rows[:3], settings=settings)
    assert len(answer["predictions"]) == 3
    assert statuses and all(s == 200 for s in statuses), [s for s in statuses if s != 200][:5]
    assert clients.refused == 0      # the canary's deployment and its promotion reloaded the serving in place
