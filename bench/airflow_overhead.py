"""What hopsml's Airflow operators cost over calling the same step directly: seconds per task beyond Airflow's own
task start. Needs the airflow extra (`pip install ".[airflow]"`).

    python bench/airflow_overhead.py              # 5 tasks of each kind
    python bench/airflow_overhead.py --tasks 10

A fresh AIRFLOW_HOME (SQLite) and project root in a temporary folder. For each step, one DAG of N independent
tasks runs under dag.test(); a task's time is its task instance's duration as Airflow records it (start to end,
inside the task runner). Airflow's own start and finish of a task is the median duration of a task that does
nothing (a `@task` returning None); a step's direct time is the median of N calls of the function the operator
calls (hopsml.airflow.steps / checks). Overhead per task = median operator task - median empty task - median direct
call. Steps without Spark are measured (a feature group insert, a model lookup, a serving definition, a sensor's
poke, a PYTHON job run and awaited): their own time is small, so what the operator adds is visible. Target: <= 1 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = '''
import datetime as dt
from airflow.sdk import DAG, task
from hopsml.airflow import (BestModelOperator, CreateServingOperator, FeatureGroupInsertOperator, HopsmlJobOperator,
                            ModelVersionSensor)
N = {n}
with DAG("{dag_id}", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False) as dag:
'''

BODIES = {
    "empty": '''
    @task
    def nothing():
        return None
    for i in range(N):
        nothing.override(task_id=f"t{i}")()
''',
    "insert": '''
    for i in range(N):
        FeatureGroupInsertOperator(task_id=f"t{i}", name=f"g{i}", path={csv!r}, primary_key=["id"])
''',
    "best_model": '''
    for i in range(N):
        BestModelOperator(task_id=f"t{i}", model_name="m", metric="accuracy")
''',
    "serving": '''
    for i in range(N):
        CreateServingOperator(task_id=f"t{i}", serving_name=f"s{i}", model_name="m", model_version=1)
''',
    "sensor": '''
    for i in range(N):
        ModelVersionSensor(task_id=f"t{i}", name="m", mode="poke", poke_interval=1, timeout=60)
''',
    "job": '''
    for i in range(N):
        HopsmlJobOperator(task_id=f"t{i}", job_name=f"j{i}", timeout_s=120)
''',
}


def _direct(kind: str, n: int, settings, csv: str) -> list[float]:
    from hopsml.airflow import checks, steps

    calls = {
        "insert": lambda i: steps.insert_into_group(settings, f"d{i}", csv, primary_key=["id"]),
        "best_model": lambda i: steps.best_model(settings, "m", "accuracy"),
        "serving": lambda i: steps.create_serving(settings, f"ds{i}", "m", 1),
        "sensor": lambda i: checks.model_version(settings, "m"),
        "job": lambda i: checks.await_job(checks.start_job(settings, f"dj{i}"), 120),
    }
    times = []
    for i in range(n):
        started = time.perf_counter()
        calls[kind](i)
        times.append(time.perf_counter() - started)
    return times


def _dag_durations(dags: Path, kind: str, n: int, csv: str) -> list[float]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    dag_id = f"bench_{kind}"
    path = dags / f"{dag_id}.py"
    path.write_text(HEADER.format(n=n, dag_id=dag_id) + BODIES[kind].replace("{csv!r}", repr(csv)))
    spec = importlib.util.spec_from_file_location(dag_id, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = module.dag.test()
    if str(run.state) != "success":
        raise SystemExit(f"the DAG {dag_id} ended {run.state}")
    with create_session() as session:
        tis = session.get(DagRun, run.id).get_task_instances(session=session)
        return [ti.duration for ti in tis]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5, help="tasks (and direct calls) per step (default 5)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hopsml-airflow-bench-"))
    (work / "dags").mkdir()
    os.environ.update({"AIRFLOW_HOME": str(work / "airflow"), "AIRFLOW__CORE__DAGS_FOLDER": str(work / "dags"),
                       "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "HOPSML_ROOT": str(work / "root"),
                       "HOPSML_PROJECT": "bench"})
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True, timeout=600)

    from hopsml import config, jobs
    from hopsml.model import registry
    from hopsml.serving.control import lifecycle

    settings = config.load(environ={}, root=str(work / "root"), project="bench")
    csv = str(work / "rows.csv")
    Path(csv).write_text("id,x\n1,0.5\n2,1.5\n")
    (work / "model.txt").write_text("a model\n")
    registry.export(str(work / "model.txt"), "m", metrics={"accuracy": 0.9}, settings=settings)
    (work / "app.py").write_text("print('done')\n")
    for i in range(args.tasks):
        for prefix in ("j", "dj"):
            jobs.create_job(f"{prefix}{i}", str(work / "app.py"), job_type=jobs.PYTHON, settings=settings)
    empty = statistics.median(_dag_durations(work / "dags", "empty", args.tasks, csv))
    print(f"Airflow's own task (an empty @task): {empty:.3f} s median over {args.tasks}")
    print(f"{'step':<12} {'direct s':>9} {'operator s':>11} {'overhead s':>11}")
    worst = 0.0
    for kind in ("insert", "best_model", "serving", "sensor", "job"):
        direct = statistics.median(_direct(kind, args.tasks, settings, csv))
        operator = statistics.median(_dag_durations(work / "dags", kind, args.tasks, csv))
        overhead = operator - empty - direct
        worst = max(worst, overhead)
        print(f"{kind:<12} {direct:>9.3f} {operator:>11.3f} {overhead:>11.3f}")
    for serving in lifecycle.get_all(settings):
        lifecycle.stop(serving.name, settings=settings)
    print(f"largest overhead per task: {worst:.3f} s (target <= 1 s)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
