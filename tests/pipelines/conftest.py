"""A real Airflow 3 for the provider's tests: an AIRFLOW_HOME of this session's own (SQLite metadata, its own dags
folder), set before any test module imports Airflow, its database migrated once; a hopsml project root per session.
Without Airflow (the default venv) nothing is set up and the test modules skip themselves."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PROJECT = "pipes"


def _airflow_installed() -> bool:
    """Whether Airflow is installed, without importing it (it reads AIRFLOW_HOME when imported); a namespace
    package of that name found elsewhere on the path has no origin."""
    spec = importlib.util.find_spec("airflow")
    return spec is not None and spec.origin is not None


if _airflow_installed():
    _home = Path(tempfile.mkdtemp(prefix="hopsml-airflow-home-"))
    (_home / "dags").mkdir()
    atexit.register(shutil.rmtree, _home, ignore_errors=True)   # the session's metadata and logs go with it
    os.environ.update({"AIRFLOW_HOME": str(_home), "AIRFLOW__CORE__DAGS_FOLDER": str(_home / "dags"),
                       "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                       # a DAG scheduled on an Asset is queued by its events only while it is not paused
                       "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False"})


def dags_folder() -> Path:
    return Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])


def airflow_env() -> dict[str, str]:
    """The environment a subprocess `airflow ...` gets: this session's Airflow and project, and this folder on the
    path (the training function the experiments import lives here)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [env.get("PYTHONPATH")])])
    return env


def airflow(*argv: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    """The `airflow` command of this venv, run to its end (its output kept for the failure message)."""
    return subprocess.run([sys.executable, "-m", "airflow", *argv], env=airflow_env(), capture_output=True,
                          text=True, timeout=timeout_s)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    done = airflow("db", "migrate", timeout_s=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return Path(os.environ["AIRFLOW_HOME"])


@pytest.fixture(scope="session")
def project(airflow_db, tmp_path_factory):
    """The session's project: HOPSML_ROOT and HOPSML_PROJECT point the operators (and subprocesses) at it; every
    serving it has is stopped at the end."""
    from hopsml import config

    root = tmp_path_factory.mktemp("root")
    saved = {k: os.environ.get(k) for k in ("HOPSML_ROOT", "HOPSML_PROJECT")}
    os.environ["HOPSML_ROOT"], os.environ["HOPSML_PROJECT"] = str(root), PROJECT
    settings = config.load(environ={}, root=str(root), project=PROJECT)
    try:
        yield settings
    finally:
        from hopsml.serving.control import lifecycle

        for serving in lifecycle.get_all(settings):
            lifecycle.stop(serving.name, settings=settings)
        if "pyspark" in sys.modules:   # the session the tasks started in this process, stopped while logging works
            from hopsml.cluster import session

            spark = session.active()
            if spark is not None:
                spark.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_dag(dag_id: str, source: str):
    """Write `source` as the dags folder's file `<dag_id>.py`, load it and run its DAG with dag.test(): the
    finished DagRun."""
    path = dags_folder() / f"{dag_id}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"test_dag_{dag_id}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag.test()


def xcom(dag_run, task_id: str, key: str = "return_value"):
    """What task `task_id` of `dag_run` pushed under `key`."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id, task_ids=task_id,
                                                 key=key)).first()
        return None if row is None else XComModel.deserialize_value(row)


def task_states(dag_run) -> dict[str, tuple[str, int]]:
    """Each task's (state, try number) in `dag_run`."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.get(DagRun, dag_run.id)
        return {ti.task_id: (str(ti.state), ti.try_number) for ti in run.get_task_instances(session=session)}


def asset_events(uri: str) -> list[dict]:
    """The extras of every event on the Asset `uri`, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(
            AssetModel.uri == uri).order_by(AssetEvent.id)
        return [dict(e.extra or {}) for e in session.scalars(query)]
