"""Named jobs and their executions, with real processes and no JVM: PYTHON jobs (hopsworks' job type for a
script without Spark) go through the same records, ids, runner, stop and LOST handling as spark-submit jobs
(tests/spark/test_jobs_spark.py runs those)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hopsml import cli, config, execution_notes, jobs, layout
from hopsml.errors import InvalidNameError, JobError
from hopsml.hopsworks import login
from hopsml.processes import start_time

WAIT_S = 120.0   # bound on every wait below: a hang fails the test instead of stalling the run


@pytest.fixture
def settings(root):
    return config.load()


def _script(tmp_path: Path, body: str, name: str = "app.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


OK_APP = """
    import os, sys
    from hopsml import execution_notes
    print("args", sys.argv[1:], "job", os.environ["HOPSML_JOB_NAME"], "execution", os.environ["HOPSML_EXECUTION_ID"])
    print("to stderr", file=sys.stderr)
    execution_notes.note("model", name="m", version=2)
    execution_notes.note("model", name="m", version=2)
"""

FAILING_APP = """
    import sys
    print("before the failure")
    raise SystemExit("the table 'sales' is empty")
"""

# Writes its pid (and its process group's) where the test says, then sleeps until it is ended.
SLEEPING_APP = """
    import os, sys, time
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()}")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
"""


def _python_job(tmp_path, settings, body, name="job", **kwargs):
    return jobs.create_job(name, _script(tmp_path, body, f"{name}.py"), settings=settings, job_type="PYTHON",
                           **kwargs)


def _wait_for_file(path: Path) -> int:
    end = time.monotonic() + WAIT_S
    while not path.exists():
        assert time.monotonic() < end, f"{path} was not written within {WAIT_S} s"
        time.sleep(0.05)
    return int(path.read_text())


def _gone(pid: int, started: int | None = None) -> bool:
    """Whether the process is gone (a zombie counts as gone), waiting up to WAIT_S."""
    end = time.monotonic() + WAIT_S
    while start_time(pid) is not None and (started is None or start_time(pid) == started):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


# --- definitions --------------------------------------------------------------------------------------------
def test_a_job_is_kept_in_the_project_and_found_by_name(tmp_path, settings, root):
    job = jobs.create_job("nightly", _script(tmp_path, OK_APP), args="--days 7 --name 'a b'",
                          spark_conf=["spark.executor.memory=2g"], description="every night", settings=settings)
    assert (job.kind, job.job_type, job.default_args) == ("python", "PYSPARK", ["--days", "7", "--name", "a b"])
    record = json.loads((root / "Projects/test/Jobs/nightly/job.json").read_text())
    assert record["app_path"] == str(tmp_path / "app.py") and record["spark_conf"] == {"spark.executor.memory": "2g"}
    again = jobs.get_job("nightly", settings)
    assert (again.spark_conf, again.description, again.created) == ({"spark.executor.memory": "2g"}, "every night",
                                                                    job.created)
    assert jobs.job_exists("nightly", settings) and not jobs.job_exists("other", settings)
    assert [j.name for j in jobs.get_jobs(settings)] == ["nightly"]
    assert again.config["appPath"] == job.app_path and again.config["spark.executor.memory"] == "2g"


def test_a_missing_job_is_named_at_once(tmp_path, settings):
    _python_job(tmp_path, settings, OK_APP, name="present")
    with pytest.raises(JobError, match=r"no job 'absent' in project 'test' \(its jobs: present\)") as caught:
        jobs.get_job("absent", settings)
    assert caught.value.job == "absent"


def test_creating_checks_name_app_and_existing_jobs(tmp_path, settings):
    app = _script(tmp_path, OK_APP)
    with pytest.raises(InvalidNameError):
        jobs.create_job("../x", app, settings=settings)
    with pytest.raises(JobError, match="does not exist: not at .*missing.py"):
        jobs.create_job("j", str(tmp_path / "missing.py"), settings=settings)
    (tmp_path / "app.sh").write_text("echo")
    with pytest.raises(JobError, match=r"a Python script \(.py\) or a notebook \(.ipynb\)"):
        jobs.create_job("j", str(tmp_path / "app.sh"), settings=settings)
    with pytest.raises(JobError, match="job type 'DOCKER'"):
        jobs.create_job("j", app, settings=settings, job_type="DOCKER")
    first = jobs.create_job("j", app, settings=settings)
    with pytest.raises(JobError, match="already exists .* overwrite=True"):
        jobs.create_job("j", app, settings=settings)
    replaced = jobs.create_job("j", app, args="--x", overwrite=True, settings=settings)
    assert replaced.default_args == ["--x"] and replaced.created == first.created


def test_an_app_inside_the_project_is_found_there(settings, root):
    resources = root / "Projects/test/Resources"
    resources.mkdir(parents=True)
    (resources / "inside.py").write_text("print('inside the project')\n")
    job = jobs.create_job("inside", "Resources/inside.py", settings=settings, job_type="PYTHON")
    assert job.app_path == "Resources/inside.py" and job.definition.app_in_project
    execution = job.run(timeout=WAIT_S)
    assert execution.success and "inside the project" in execution.log()


# --- executions ---------------------------------------------------------------------------------------------
def test_a_run_records_state_exit_code_logs_and_products(tmp_path, settings, root):
    job = _python_job(tmp_path, settings, OK_APP, args="default 'two words'")
    execution = job.run(timeout=WAIT_S)
    assert (execution.id, execution.state, execution.final_status, execution.success, execution.exit_code) == \
        (1, "FINISHED", "SUCCEEDED", True, 0)
    assert execution.args == ["default", "two words"]
    assert "args ['default', 'two words'] job job execution 1" in execution.log("stdout")
    assert execution.log("stderr") == "to stderr\n"
    assert [(p["kind"], p["name"], p["version"]) for p in execution.produced] == [("model", "m", 2)]
    assert execution.start <= execution.end and execution.duration_s >= 0
    folder = root / "Projects/test/Jobs/job/executions/1"
    record = json.loads((folder / "execution.json").read_text())
    assert record["state"] == "FINISHED" and record["produced"][0]["name"] == "m"
    assert (folder / "program.py").read_text() == Path(job.app_path).read_text()   # what ran, kept

    second = job.run(["given"], timeout=WAIT_S)
    assert second.id == 2 and "args ['given']" in second.log()
    assert [e.id for e in job.get_executions()] == [2, 1]
    assert (job.get_state(), job.get_final_state()) == ("FINISHED", "SUCCEEDED")
    out, err = second.download_logs(str(tmp_path / "logs"))
    assert Path(out).name == "job_2_stdout.log" and "args ['given']" in Path(out).read_text()
    assert Path(err).read_text() == "to stderr\n"


def test_a_failed_run_fails_with_its_log_tail(tmp_path, settings):
    job = _python_job(tmp_path, settings, FAILING_APP)
    execution = job.run(timeout=WAIT_S)
    assert (execution.state, execution.final_status, execution.success, execution.exit_code) == \
        ("FAILED", "FAILED", False, 1)
    assert "exited with code 1" in execution.error
    with pytest.raises(JobError, match="execution 1 of job 'job' is FAILED") as caught:
        execution.raise_for_status()
    assert "the table 'sales' is empty" in str(caught.value) and "before the failure" in str(caught.value)
    assert caught.value.execution == 1 and "the table 'sales' is empty" in caught.value.log_tail


def test_concurrent_runs_get_distinct_ids_and_exclusive_refuses(tmp_path, settings):
    job = _python_job(tmp_path, settings, SLEEPING_APP)
    started = [job.run([str(tmp_path / f"pid-{n}")], await_termination=False) for n in range(3)]
    assert sorted(e.id for e in started) == [1, 2, 3]
    assert all(e.state == "RUNNING" for e in started)
    with pytest.raises(JobError, match=r"already running \(execution 1 \(RUNNING"):
        job.run([str(tmp_path / "pid-x")], await_termination=False, exclusive=True)
    assert sorted(e.id for e in job.get_executions()) == [1, 2, 3]   # the refused run left no execution
    for execution in started:
        assert execution.stop(timeout=WAIT_S).state == "KILLED"
    assert job.run([str(tmp_path / "pid-4")], await_termination=False, exclusive=True).stop().id == 4


def test_ids_are_claimed_once_when_processes_run_at_once(tmp_path, settings, root):
    """Several processes start runs of the same job at the same moment: every run has its own id."""
    job = _python_job(tmp_path, settings, "print('ok')\n")
    code = ("from hopsml import jobs; import sys; "
            "print(jobs.get_job('job').run(await_termination=False).await_termination(120).id)")
    env = {**os.environ, "HOPSML_ROOT": str(root), "HOPSML_PROJECT": "test"}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    ids = sorted(int(p.communicate(timeout=WAIT_S)[0]) for p in procs)
    assert ids == [1, 2, 3, 4]
    assert all(e.success for e in job.get_executions())


def test_stop_ends_the_app_and_records_killed(tmp_path, settings):
    job = _python_job(tmp_path, settings, SLEEPING_APP)
    execution = job.run([str(tmp_path / "pid")], await_termination=False)
    pid = _wait_for_file(tmp_path / "pid")
    stopped = execution.stop(timeout=WAIT_S)
    assert (stopped.state, stopped.final_status, stopped.success) == ("KILLED", "KILLED", False)
    assert stopped.exit_code == -signal.SIGTERM and "stopped" in stopped.error
    assert _gone(pid)


def test_a_timeout_while_awaiting_names_the_execution(tmp_path, settings):
    job = _python_job(tmp_path, settings, SLEEPING_APP)
    execution = job.run([str(tmp_path / "pid")], await_termination=False)
    _wait_for_file(tmp_path / "pid")
    with pytest.raises(JobError, match="execution 1 of job 'job' did not end within 0.2 s"):
        execution.await_termination(timeout=0.2)
    assert execution.state == "RUNNING"   # awaiting did not stop it
    with pytest.raises(JobError, match="execution 2 of job 'job' did not end within 0.5 s and was stopped"):
        job.run([str(tmp_path / "pid2")], timeout=0.5)
    assert job.get_execution(2).state == "KILLED"
    execution.stop(timeout=WAIT_S)


def test_a_killed_awaiting_caller_leaves_its_execution_lost_and_the_app_gone(tmp_path, settings, root):
    job = _python_job(tmp_path, settings, SLEEPING_APP)
    code = f"from hopsml import jobs; jobs.get_job('job').run([{str(tmp_path / 'pid')!r}])"
    env = {**os.environ, "HOPSML_ROOT": str(root), "HOPSML_PROJECT": "test"}
    caller = subprocess.Popen([sys.executable, "-c", code], env=env)
    pid = _wait_for_file(tmp_path / "pid")
    started = start_time(pid)
    assert job.get_execution(1).state == "RUNNING"
    caller.kill()
    caller.wait(timeout=WAIT_S)
    execution = job.get_execution(1).await_termination(timeout=WAIT_S)
    assert (execution.state, execution.final_status, execution.success) == ("LOST", "FAILED", False)
    assert f"the process that awaited it (pid {caller.pid}" in execution.error
    assert _gone(pid, started)


def test_a_killed_runner_shows_lost_and_its_app_is_ended_by_the_reader(tmp_path, settings):
    job = _python_job(tmp_path, settings, SLEEPING_APP)
    execution = job.run([str(tmp_path / "pid")], await_termination=False)
    pid = _wait_for_file(tmp_path / "pid")
    runner = execution.record["runner"]
    os.kill(runner["pid"], signal.SIGKILL)
    assert _gone(runner["pid"], runner["started"])
    lost = execution.await_termination(timeout=WAIT_S)
    assert (lost.state, lost.final_status) == ("LOST", "FAILED") and "its runner" in lost.error
    assert json.loads(Path(lost.storage.path(lost.dir.record)).read_text())["state"] == "LOST"   # recorded
    assert _gone(pid)


def test_an_execution_without_a_record_is_named(tmp_path, settings):
    job = _python_job(tmp_path, settings, OK_APP)
    with pytest.raises(JobError, match="job 'job' has no execution 7"):
        job.get_execution(7)
    with pytest.raises(JobError, match="has no executions yet"):
        job.get_state()


def test_delete_refuses_while_running(tmp_path, settings, root):
    job = _python_job(tmp_path, settings, SLEEPING_APP)
    execution = job.run([str(tmp_path / "pid")], await_termination=False)
    with pytest.raises(JobError, match="has a running execution \\(1\\): stop it first"):
        job.delete()
    execution.stop(timeout=WAIT_S)
    job.delete()
    assert not jobs.job_exists("job", settings) and not (root / "Projects/test/Jobs/job").exists()


def test_notes_are_written_only_inside_an_execution(tmp_path, monkeypatch):
    monkeypatch.delenv(execution_notes.ENV, raising=False)
    execution_notes.note("dataset", name="nowhere")   # nothing to write to, nothing fails
    notes = tmp_path / "produced.jsonl"
    monkeypatch.setenv(execution_notes.ENV, str(notes))
    execution_notes.note("dataset", name="iris")
    execution_notes.note("featuregroup", name="sales", version=1, commit=0)
    execution_notes.note("featuregroup", name="sales", version=1, commit=1)
    assert [(n["kind"], n.get("commit")) for n in execution_notes.read(str(notes))] == \
        [("dataset", None), ("featuregroup", 0), ("featuregroup", 1)]


# --- the CLI and hopsworks' names --------------------------------------------------------------------------
def _cli(capsys, *words):
    code = cli.main(list(words))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_creates_runs_shows_and_deletes_jobs(tmp_path, root, capsys):
    app = _script(tmp_path, OK_APP)
    code, out, _ = _cli(capsys, "jobs", "create", "etl", app, "--args", "--day 1", "--type", "python",
                        "--spark-conf", "spark.executor.memory=2g")
    assert code == 0 and "job 'etl' created" in out
    code, out, _ = _cli(capsys, "jobs", "run", "etl")
    assert code == 0 and "execution 1 of job 'etl': FINISHED (SUCCEEDED), exit code 0" in out
    assert "produced: model m:2" in out
    code, out, _ = _cli(capsys, "jobs", "run", "etl", "--args", "--day 2", "--no-wait")
    assert code == 0 and "execution 2 of job 'etl'" in out
    jobs.get_job("etl").get_execution(2).await_termination(WAIT_S)
    code, out, _ = _cli(capsys, "jobs", "show", "etl")
    assert code == 0 and "spark.executor.memory=2g" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("ID"))
    assert lines[header + 1].split()[:4] == ["2", "FINISHED", "SUCCEEDED", "0"] and "model m:2" in lines[header + 1]
    code, out, _ = _cli(capsys, "jobs", "logs", "etl", "1")
    assert "args ['--day', '1']" in out
    code, out, _ = _cli(capsys, "jobs", "logs", "etl", "--stderr")
    assert out.strip() == "to stderr"
    code, out, _ = _cli(capsys, "jobs", "list")
    assert "etl" in out and "FINISHED" in out
    code, out, _ = _cli(capsys, "jobs", "delete", "etl")
    assert code == 0 and not jobs.job_exists("etl")


def test_the_cli_fails_a_failed_run_with_its_log_tail(tmp_path, root, capsys):
    assert _cli(capsys, "jobs", "create", "bad", _script(tmp_path, FAILING_APP), "--type", "PYTHON")[0] == 0
    code, out, err = _cli(capsys, "jobs", "run", "bad")
    assert code == 1 and "execution 1 of job 'bad' is FAILED (FAILED, exit code 1)" in err
    assert "the table 'sales' is empty" in err
    code, _, err = _cli(capsys, "jobs", "run", "absent")
    assert code == 1 and "no job 'absent'" in err


def test_hopsworks_job_api(tmp_path, root):
    api = login().get_job_api()
    conf = api.get_configuration("PYTHON")
    assert conf["jobType"] == "PYTHON" and "appPath" in conf
    conf.update(appPath=_script(tmp_path, OK_APP), defaultArgs="--from api")
    job = api.create_job("api-job", conf)
    assert api.exists("api-job") and api.get_job("missing") is None and [j.name for j in api.get_jobs()] == ["api-job"]
    execution = job.run(await_termination=True)
    assert execution.success and "args ['--from', 'api']" in execution.log()
    spark = api.get_configuration("PYSPARK")
    spark.update(appPath=job.app_path, properties="spark.sql.shuffle.partitions=4", amMemory=2048)
    again = api.create_job("api-job", spark)   # create-or-update, as on hopsworks
    assert again.job_type == "PYSPARK" and again.spark_conf["spark.sql.shuffle.partitions"] == "4"
    assert again.definition.config["amMemory"] == 2048 and len(again.get_executions()) == 1
    with pytest.raises(JobError, match="no appPath"):
        api.create_job("x", api.get_configuration("PYSPARK"))
    with pytest.raises(JobError, match="DOCKER"):
        api.get_configuration("DOCKER")


def test_layout_of_executions():
    edir = layout.JobDir.of("p", "j").execution("3")
    assert (edir.id, edir.notes) == (3, "Projects/p/Jobs/j/executions/3/produced.jsonl")
    with pytest.raises(InvalidNameError, match="invalid execution id 0"):
        layout.JobDir.of("p", "j").execution(0)


def test_an_exclusive_retry_after_a_killed_caller_waits_for_the_old_run_to_end(tmp_path, settings, root):
    """A retried task whose worker was killed: the old execution is being ended (LOST); the retry waits for that
    instead of refusing, and never runs beside it."""
    job = _python_job(tmp_path, settings, SLEEPING_APP)
    code = f"from hopsml import jobs; jobs.get_job('job').run([{str(tmp_path / 'pid')!r}])"
    env = {**os.environ, "HOPSML_ROOT": str(root), "HOPSML_PROJECT": "test"}
    caller = subprocess.Popen([sys.executable, "-c", code], env=env)
    old_pid = _wait_for_file(tmp_path / "pid")
    caller.kill()
    caller.wait(timeout=WAIT_S)
    retry = job.run([str(tmp_path / "pid2")], await_termination=False, exclusive=True)
    assert retry.id == 2 and job.get_execution(1).state == "LOST"
    assert start_time(old_pid) is None
    retry.stop(timeout=WAIT_S)


def test_a_job_named_with_spaces_and_any_unicode_under_such_a_root_runs(tmp_path, monkeypatch, capsys):
    """Names survive any path: the job's name and the project root hold spaces and non-ASCII letters."""
    root = tmp_path / "root dir ü 名"
    monkeypatch.setenv("HOPSML_ROOT", str(root))
    monkeypatch.setenv("HOPSML_PROJECT", "p")
    job = jobs.create_job("nightly ü 名", _script(tmp_path, "print('ran')\n"), settings=config.load(),
                          job_type="PYTHON")
    execution = job.run(await_termination=True)
    assert execution.state == "FINISHED" and "ran" in execution.log()
    assert cli.main(["jobs", "show", "nightly ü 名"]) == 0
    assert "FINISHED" in capsys.readouterr().out
