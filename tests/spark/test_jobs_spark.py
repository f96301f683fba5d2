"""Named jobs under a real spark-submit, and a notebook job in a real fresh kernel: a job whose app uses Spark and
hopsml runs to its end with what it produced recorded; a failing app fails with its log tail; a killed awaiting
caller leaves the execution LOST and no app process behind; two runs at once get their own ids; the web view
shows the job and its executions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from hopsml import config, jobs
from hopsml.processes import start_time

pytestmark = pytest.mark.slow

WAIT_S = 600.0   # a hang, not a slow run: each spark-submit here takes seconds

SPARK_APP = """
    import sys
    from hopsml import experiment
    from hopsml.cluster import session
    from hopsml.data import prepare_table, samples

    spark = session.get_or_create()
    print("master", spark.sparkContext.master, "rows", spark.range(10).count())
    samples.write_table(sys.argv[1], bad_rows=False)
    prepare_table(sys.argv[1], "iris", label="species", spark=spark)

    def train():
        return {"accuracy": 0.5}

    experiment.launch(train, name="from-a-job")
"""

FAILING_APP = """
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.getOrCreate()
    spark.range(3).count()
    raise ValueError("no rows for 2024-01-01")
"""

SLEEPING_APP = """
    import os, sys, time
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
"""


def _script(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _wait_for_file(path: Path) -> int:
    end = time.monotonic() + WAIT_S
    while not path.exists():
        assert time.monotonic() < end, f"{path} was not written within {WAIT_S} s"
        time.sleep(0.1)
    return int(path.read_text())


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """One root where the Spark job ran once to its end: (settings, job, execution)."""
    base = tmp_path_factory.mktemp("jobs-spark")
    settings = config.load(environ={}, root=str(base / "root"), project="test", master="local[2]",
                           log_dir=str(base / "logs"))
    job = jobs.create_job("prepare", _script(base, "prepare.py", SPARK_APP), args=[str(base / "iris.csv")],
                          spark_conf={"spark.sql.shuffle.partitions": "4"}, settings=settings)
    return settings, job, job.run(timeout=WAIT_S)


def test_a_spark_job_runs_to_its_end_with_what_it_produced(ran):
    settings, job, execution = ran
    assert (execution.state, execution.final_status, execution.exit_code) == ("FINISHED", "SUCCEEDED", 0), \
        execution.log_tail()
    assert "master local[2] rows 10" in execution.log()
    command = execution.record["command"]
    assert command[0].endswith("spark-submit") and command[1:3] == ["--master", "local[2]"]
    assert "spark.sql.shuffle.partitions=4" in command
    kinds = {(p["kind"], p.get("name")) for p in execution.produced}
    assert ("dataset", "iris") in kinds and ("experiment", "from-a-job") in kinds
    experiment_id = next(p["id"] for p in execution.produced if p["kind"] == "experiment")
    assert (Path(settings.root) / "Projects/test/Experiments" / experiment_id / "experiment.json").is_file()


def test_a_failing_spark_app_fails_with_its_log_tail(ran, tmp_path):
    settings = ran[0]
    job = jobs.create_job("failing", _script(tmp_path, "failing.py", FAILING_APP), settings=settings)
    execution = job.run(timeout=WAIT_S)
    assert (execution.state, execution.success) == ("FAILED", False) and execution.exit_code != 0
    with pytest.raises(jobs.JobError, match="execution 1 of job 'failing' is FAILED") as caught:
        execution.raise_for_status()
    assert "ValueError: no rows for 2024-01-01" in str(caught.value)


def test_a_killed_awaiting_caller_leaves_the_execution_lost_and_the_app_gone(ran, tmp_path):
    settings = ran[0]
    job = jobs.create_job("sleeper", _script(tmp_path, "sleeper.py", SLEEPING_APP), settings=settings)
    code = f"from hopsml import jobs; jobs.get_job('sleeper').run([{str(tmp_path / 'pid')!r}])"
    env = {**os.environ, "HOPSML_ROOT": settings.root, "HOPSML_PROJECT": "test", "HOPSML_MASTER": "local[2]"}
    caller = subprocess.Popen([sys.executable, "-c", code], env=env)
    pid = _wait_for_file(tmp_path / "pid")   # the app's Python, started by spark-submit's JVM
    started = start_time(pid)
    assert job.get_execution(1).state == "RUNNING"
    caller.kill()
    caller.wait(timeout=WAIT_S)
    execution = job.get_execution(1).await_termination(timeout=WAIT_S)
    assert (execution.state, execution.final_status) == ("LOST", "FAILED")
    child = execution.record["child"]
    end = time.monotonic() + WAIT_S
    while start_time(pid) == started or start_time(child["pid"]) == child["started"]:
        assert time.monotonic() < end, "the app's processes outlived their execution"
        time.sleep(0.1)


def test_runs_at_once_get_their_own_ids(ran, tmp_path):
    settings = ran[0]
    job = jobs.create_job("twice", _script(tmp_path, "twice.py", "print('ran')\n"), settings=settings)
    first = job.run(await_termination=False)
    second = job.run(await_termination=False)
    assert {first.id, second.id} == {1, 2}
    assert first.await_termination(WAIT_S).success and second.await_termination(WAIT_S).success
    assert "ran" in first.log() and "ran" in second.log()


def test_a_notebook_job_runs_in_a_fresh_kernel(ran, tmp_path):
    settings = ran[0]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("import os, sys\nprint('kernel', os.getpid(), sys.argv[1:])"),
                      nbformat.v4.new_code_cell("from hopsml import execution_notes\n"
                                                "execution_notes.note('model', name='nb', version=1)\n6 * 7")]
    path = tmp_path / "report.ipynb"
    nbformat.write(notebook, str(path))
    job = jobs.create_job("report", str(path), args="--day 3", settings=settings, job_type="PYTHON")
    assert job.kind == "notebook"
    execution = job.run(timeout=WAIT_S)
    assert execution.success, execution.log_tail()
    out = execution.log()
    assert "['--day', '3']" in out and "42" in out
    kernel_pid = int(out.split("kernel ", 1)[1].split()[0])
    assert kernel_pid != os.getpid() and start_time(kernel_pid) is None   # its own process, ended with the job
    executed = nbformat.read(Path(settings.root) / "Projects/test/Jobs/report/executions/1/executed.ipynb", 4)
    assert executed.cells[-1].outputs[0]["data"]["text/plain"] == "42"
    assert execution.produced[0]["name"] == "nb"

    notebook.cells.append(nbformat.v4.new_code_cell("raise RuntimeError('cell three failed')"))
    nbformat.write(notebook, str(path))
    failed = job.run(timeout=WAIT_S)
    assert (failed.state, failed.exit_code) == ("FAILED", 1)
    assert "RuntimeError: cell three failed" in failed.log_tail()


def test_the_web_view_shows_jobs_and_executions(ran):
    pytest.importorskip("flask")
    from hopsml.ui.app import create_app

    settings, job, execution = ran
    client = create_app(settings).test_client()
    page = client.get("/p/test/jobs/", headers={"Host": "localhost"})
    assert page.status_code == 200 and b"/p/test/jobs/prepare" in page.data
    page = client.get("/p/test/jobs/prepare", headers={"Host": "localhost"}).data.decode()
    assert 'data-state="FINISHED"' in page and "SUCCEEDED" in page
    assert 'href="/p/test/datasets/iris"' in page and "experiment " in page
    log = client.get(f"/p/test/jobs/prepare/executions/{execution.id}/stdout", headers={"Host": "localhost"})
    assert log.status_code == 200 and log.mimetype == "text/plain" and b"master local[2]" in log.data
    assert client.get("/p/test/jobs/absent", headers={"Host": "localhost"}).status_code == 404


def test_a_killed_runner_leaves_no_spark_app_behind(ran, tmp_path):
    """The runner killed with SIGKILL: spark-submit's JVM dies with it (parent-death signal), and the reader that
    finds the execution LOST ends the app's Python, which the JVM had started."""
    import signal

    settings = ran[0]
    job = jobs.create_job("orphan", _script(tmp_path, "orphan.py", SLEEPING_APP), settings=settings)
    execution = job.run([str(tmp_path / "pid")], await_termination=False)
    pid = _wait_for_file(tmp_path / "pid")
    started = start_time(pid)
    os.kill(execution.record["runner"]["pid"], signal.SIGKILL)
    lost = execution.await_termination(timeout=WAIT_S)
    assert (lost.state, lost.final_status) == ("LOST", "FAILED")
    end = time.monotonic() + WAIT_S
    while start_time(pid) == started:
        assert time.monotonic() < end, "the app's Python outlived its lost execution"
        time.sleep(0.1)


SECRET_APP = """
    import json, os
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    conf = spark.sparkContext.getConf()
    lines, pid = [], os.getpid()
    while pid > 1:   # this app, the JVM that started it, spark-submit's shell, the runner
        lines.append(open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
        pid = int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])
    print("the app was given", conf.get("spark.jars.repositories"), conf.get("spark.hopsml.github"))
    print(json.dumps({"secret": conf.get("spark.hadoop.fs.s3a.secret.key") == "MARKER" + "jobsecret",
                      "env": conf.get("spark.executorEnv.DB_PASS") == "MARKER" + "dbpass",
                      "property": spark._jvm.System.getProperty("javax.net.ssl.trustStorePassword")
                      == "MARKER" + "truststore",
                      "plain": conf.get("spark.hopsml.plain"),
                      "default": conf.get("spark.scheduler.barrier.maxConcurrentTasksCheck.interval"),
                      "on_a_command_line": [line for line in lines if "MARKER" in line]}))
"""

# The probe's planted values (issue 57): the known forms, and the ones the shape list did not know.
PLANTED = {
    "spark.hadoop.fs.s3a.secret.key": "MARKERjobsecret",
    "spark.hadoop.fs.azure.sas.box.acct.blob.core.windows.net": "sv=2022-11-02&sr=c&sig=MARKERsassignature000",
    "spark.driver.extraJavaOptions": "-Dhopsml.plain=1 -Djavax.net.ssl.trustStorePassword=MARKERtruststore",
    "spark.jars.repositories": "https://ci:MARKERrepopassword@repo.example.com/maven2",
    "spark.executorEnv.DB_PASS": "MARKERdbpass",
    "spark.hopsml.github": "ghp_MARKERgithub0123456789abcdefghijklmno",
    "spark.hopsml.slack": "xoxb-MARKERslack-0123456789",
    "spark.hopsml.stripe": "sk_live_MARKERstripe0123456789",
    "spark.hopsml.basic": "Basic MARKERbasicdXNlcjpwYXNz",
}


def test_a_jobs_secret_settings_reach_spark_but_no_command_line_record_log_or_view(ran, tmp_path, capsys):
    import json

    from hopsml import cli
    from hopsml.ui import create_app

    settings = ran[0]
    job = jobs.create_job("secretive", _script(tmp_path, "secretive.py", SECRET_APP), settings=settings,
                          spark_conf={**PLANTED, "spark.hopsml.plain": "x"})
    execution = job.run(timeout=WAIT_S)
    assert execution.success, execution.log_tail()
    seen = json.loads(execution.log().strip().splitlines()[-1])
    # the secrets through the properties file and a Java argument file, the plain one on the command line, the
    # Spark defaults kept
    assert seen == {"secret": True, "env": True, "property": True, "plain": "x", "default": "1s",
                    "on_a_command_line": []}
    assert "the app was given https://ci:***@repo.example.com/maven2 ***" in execution.log()   # redacted as written
    words = re.split(r"[\s@=:]+", " ".join(PLANTED.values()))
    planted = [word.encode() for word in words if "MARKER" in word]   # the app's text (program.py) has "MARKER" alone
    leaks = [str(p) for p in Path(settings.root).rglob("*")
             if p.is_file() and any(word in p.read_bytes() for word in planted)]
    assert leaks == [str(Path(settings.root) / "Projects/test/Jobs/secretive/secrets.json")]   # kept apart, 0600
    assert os.stat(leaks[0]).st_mode & 0o777 == 0o600
    shown = jobs.get_job("secretive", settings).spark_conf
    assert shown["spark.driver.extraJavaOptions"] == "-Dhopsml.plain=1 -Djavax.net.ssl.trustStorePassword=***"
    assert shown["spark.jars.repositories"] == "https://repo.example.com/maven2"
    assert shown["spark.hadoop.fs.s3a.secret.key"] == "***" and shown["spark.hopsml.plain"] == "x"
    # what shows settings: the CLI's job and settings, the web view's job page
    env = {"HOPSML_ROOT": settings.root, "HOPSML_PROJECT": "test", "HOPSML_SPARK_CONF": json.dumps(PLANTED)}
    old = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        assert cli.main(["jobs", "show", "secretive"]) == 0
        assert cli.main(["settings"]) == 0
    finally:
        for key, value in old.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    printed = capsys.readouterr().out
    assert "trustStorePassword=***" in printed and "MARKER" not in printed
    page = create_app(settings).test_client().get("/p/test/jobs/secretive").get_data(as_text=True)
    assert "trustStorePassword=***" in page and "MARKER" not in page
    # a job re-created from what it shows (hopsworks' job.config round trip) keeps its secrets
    again = jobs.create_job("secretive", job.app_path, spark_conf=jobs.get_job("secretive", settings).spark_conf,
                            settings=settings, overwrite=True)
    assert again._with_secrets().spark_conf == {**PLANTED, "spark.hopsml.plain": "x"}
