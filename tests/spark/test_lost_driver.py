"""A driver killed mid-run (SIGKILL: no finally, no atexit) leaves its experiment RUNNING in the
record; its heartbeat stops, so 'hopsml experiments list' shows it LOST and mark-lost records it."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from hopsml import cli
from hopsml.fs import Storage
from hopsml.tracking import record as records

SCRIPT = textwrap.dedent("""
    import os, time
    from hopsml import experiment

    def train():
        print(f"training in {os.getpid()}", flush=True)
        time.sleep(300)

    experiment.launch(train, name="doomed")
""")


def _wait_for(condition, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    return condition()


def _task_pid(storage, rec):
    path = records.ExperimentDir.from_id("p", rec.id).output_log
    if not storage.exists(path):
        return None
    text = storage.read_text(path)
    return int(text.split("training in ", 1)[1].split()[0]) if "training in " in text else None


def test_a_killed_driver_leaves_a_run_that_list_shows_lost(tmp_path, capsys, monkeypatch):
    root = tmp_path / "root"
    env = {**os.environ, "HOPSML_ROOT": str(root), "HOPSML_PROJECT": "p", "HOPSML_HEARTBEAT_S": "0.5",
           "HOPSML_LOST_AFTER_S": "3", "HOPSML_MASTER": "local[2]", "HOPSML_LOG_DIR": str(tmp_path / "logs")}
    env.pop("HOPSML_CONF", None)
    (tmp_path / "doomed.py").write_text(SCRIPT)
    with open(tmp_path / "driver.out", "wb") as out:
        driver = subprocess.Popen([sys.executable, str(tmp_path / "doomed.py")], env=env, cwd=tmp_path,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    storage, task_pid = Storage(str(root)), None
    try:
        rec = _wait_for(lambda: next(iter(records.list_records(storage, "p")), None), 300)
        assert rec is not None, (tmp_path / "driver.out").read_text()[-3000:]
        task_pid = _wait_for(lambda: _task_pid(storage, rec), 300)
        assert task_pid, (tmp_path / "driver.out").read_text()[-3000:]
        assert records.shown_state(storage, "p", rec, lost_after_s=3)[0] == "RUNNING"  # its driver beats
        os.killpg(driver.pid, signal.SIGKILL)   # the driver and its JVM, at once
        driver.wait(60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(60)
    monkeypatch.setenv("HOPSML_LOST_AFTER_S", "3")   # for the commands run here
    try:
        argv = ["--root", str(root), "--project", "p", "experiments"]
        assert records.read_record(storage, "p", rec.id).state == "RUNNING"   # what the record still says

        def listed_lost():
            capsys.readouterr()
            assert cli.main([*argv, "list"]) == 0
            return " LOST " in capsys.readouterr().out
        assert _wait_for(listed_lost, 60)
        assert cli.main([*argv, "mark-lost", rec.id]) == 0
        assert records.read_record(storage, "p", rec.id).state == "LOST"
        assert cli.main([*argv, "clean", "--lost"]) == 0
        assert not storage.exists(records.ExperimentDir.from_id("p", rec.id).path)
    finally:
        try:
            os.kill(task_pid, signal.SIGKILL)   # the task's Python worker, if Spark left it behind
        except (ProcessLookupError, TypeError):
            pass
