"""hopsml's named jobs under Airflow: HopsmlJobOperator runs one and waits, JobExecutionSensor waits on its
execution, Hopsworks' names work for DAGs that move over; a failing job fails its task with the log's last lines
and each retry is a new execution, never two at once; a missing job fails its task at once. The jobs are real
(PYTHON jobs: a script run by this Python, no JVM)."""

from __future__ import annotations

import pytest

pytest.importorskip("airflow.sdk")   # the provider runs where the airflow extra is installed
jobs = pytest.importorskip("hopsml.jobs")

from conftest import PROJECT, asset_events, run_dag, task_states, xcom  # noqa: E402

from hopsml.airflow import checks  # noqa: E402

DAG_SOURCE = '''
import datetime as dt

from airflow.sdk import DAG

from hopsml.airflow import HopsmlJobOperator, HopsworksLaunchOperator, JobExecutionSensor

with DAG("jobs", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False,
         default_args={"retries": 1, "retry_delay": dt.timedelta(seconds=1)}) as dag:
    run = HopsmlJobOperator(task_id="run", job_name="hello", args=["--greeting", "hi"], timeout_s=300)
    JobExecutionSensor(task_id="finished", job_name="hello", execution_id=run.output["execution_id"], mode="poke",
                       poke_interval=1, timeout=300)
    HopsworksLaunchOperator(task_id="moved_over", job_name="broken", project_name=PROJECT, wait_timeout_s=300)
    HopsmlJobOperator(task_id="missing", job_name="nosuchjob")
    HopsmlJobOperator(task_id="produce", job_name="exporter", timeout_s=300)
'''


EXPORTER = """
import os, tempfile
from hopsml.model import export

folder = tempfile.mkdtemp()
with open(os.path.join(folder, "weights.bin"), "wb") as out:
    out.write(b"weights")
export(os.path.join(folder, "weights.bin"), "tiny", metrics={"accuracy": 0.5})
"""


@pytest.fixture(scope="module")
def made_jobs(project, tmp_path_factory):
    folder = tmp_path_factory.mktemp("apps")
    (folder / "hello.py").write_text("import sys\nprint('hello', sys.argv[1:])\n")
    (folder / "broken.py").write_text("import sys\nprint('about to fail: the answer is 42')\nsys.exit(3)\n")
    jobs.create_job("hello", str(folder / "hello.py"), job_type=jobs.PYTHON, settings=project)
    jobs.create_job("broken", str(folder / "broken.py"), job_type=jobs.PYTHON, settings=project)
    (folder / "exporter.py").write_text(EXPORTER)
    jobs.create_job("exporter", str(folder / "exporter.py"), job_type=jobs.PYTHON, settings=project)
    (folder / "sleeper.py").write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n")
    jobs.create_job("sleeper", str(folder / "sleeper.py"), job_type=jobs.PYTHON, settings=project)
    return project, run_dag("jobs", DAG_SOURCE.replace("PROJECT", repr(PROJECT)))


def test_a_job_runs_and_its_execution_is_awaited(made_jobs):
    settings, dag_run = made_jobs
    states = task_states(dag_run)
    assert states["run"] == ("success", 1) and states["finished"][0] == "success"
    ref = xcom(dag_run, "run")
    execution = jobs.get_job("hello", settings).get_execution(ref["execution_id"])
    assert execution.success and ref["final_status"] == "SUCCEEDED"
    assert "hello ['--greeting', 'hi']" in execution.log_tail()
    assert xcom(dag_run, "finished")["execution_id"] == ref["execution_id"]
    assert asset_events(f"hopsml://{PROJECT}/jobs/hello") == [{"execution_id": ref["execution_id"]}]


def test_a_failing_job_fails_its_task_and_each_retry_is_a_new_execution(made_jobs):
    settings, dag_run = made_jobs
    assert str(dag_run.state) == "failed"
    assert task_states(dag_run)["moved_over"] == ("failed", 2)
    executions = jobs.get_job("broken", settings).get_executions()
    assert len(executions) == 2 and all(e.state == "FAILED" and e.exit_code == 3 for e in executions)
    first, second = sorted(executions, key=lambda e: e.id)
    assert first.end <= second.start                             # never two at once


def test_the_failure_carries_the_executions_log_tail(made_jobs):
    settings, _ = made_jobs
    execution = checks.start_job(settings, "broken")
    with pytest.raises(checks.ExecutionFailed, match="(?s)exit code 3.*about to fail: the answer is 42"):
        checks.await_job(execution, 300)


def test_a_missing_job_fails_its_task_at_once_naming_it(made_jobs):
    settings, dag_run = made_jobs
    assert task_states(dag_run)["missing"] == ("failed", 1)      # retries=1, but no retry makes the job appear
    with pytest.raises(Exception, match="no job 'nosuchjob' in project"):
        checks.start_job(settings, "nosuchjob")


def test_what_a_job_produced_gets_an_event_on_its_own_asset(made_jobs):
    settings, dag_run = made_jobs
    assert task_states(dag_run)["produce"] == ("success", 1)
    assert [e.get("kind") for e in xcom(dag_run, "produce")["produced"]] == ["model"]
    events = asset_events(f"hopsml://{PROJECT}/models/tiny")      # through the operator's AssetAlias
    assert len(events) == 1 and events[0]["version"] == 1


def test_a_killed_worker_leaves_its_job_execution_lost_and_the_app_gone(made_jobs):
    """The task's process is killed with SIGKILL while the job runs (what a lost Airflow worker does): the
    execution it owned is recorded LOST, not RUNNING for ever, and its app is gone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    settings, _ = made_jobs
    worker = subprocess.Popen([sys.executable, "-c", "from hopsml import config; from hopsml.airflow import checks; "
                               "checks.run_job(config.load(), 'sleeper', None, 600)"],
                              env={**os.environ, "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": settings.project})
    job = jobs.get_job("sleeper", settings)
    deadline = time.monotonic() + 300
    while not (job.get_executions() and "sleeping" in job.get_executions()[0].log()):
        assert time.monotonic() < deadline and worker.poll() is None, "the job did not start"
        time.sleep(0.2)
    execution = job.get_executions()[0]
    app = int(execution.record["child"]["pid"])
    worker.send_signal(signal.SIGKILL)
    worker.wait(60)
    while execution.refresh().state == "RUNNING":
        assert time.monotonic() < deadline, "the execution stayed RUNNING after its worker was killed"
        time.sleep(0.2)
    assert execution.state == "LOST" and execution.final_status == "FAILED"
    while os.path.exists(f"/proc/{app}") and open(f"/proc/{app}/stat").read().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline, "the job's app outlived its execution"
        time.sleep(0.2)
