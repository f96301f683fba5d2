"""The command line where a newcomer meets it first: no Java, a pipe closed early, a failed run's traceback."""

import os
import subprocess
import sys

from hopsml import cli, config, layout
from hopsml.fs import Storage
from hopsml.tracking.record import ExperimentRecord


def _record(settings, run_id, **fields):
    exp_dir = layout.ExperimentDir.of(settings.project, "app-1", run_id)
    rec = ExperimentRecord(id=exp_dir.id, name=f"run-{run_id}", app_id="app-1", run_id=run_id, **fields)
    Storage(settings.root).write_json(exp_dir.record, rec.to_dict())
    return exp_dir.id


def test_without_java_the_error_says_to_install_java_17(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n1,x\n")
    env = {**os.environ, "PATH": str(tmp_path / "nothing"), "HOPSML_ROOT": str(tmp_path / "root"),
           "HOPSML_LOG_DIR": str(tmp_path / "logs"),
           "HOPSML_SMALL_TABLE_ROWS": "0"}   # Spark's job even for this small table (small ones skip Spark)
    env.pop("JAVA_HOME", None)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    done = subprocess.run([sys.executable, "-m", "hopsml.cli", "prep", "tabular", str(csv), "t", "--label", "b"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Java 17" in done.stderr and "JAVA_HOME" in done.stderr and "apt-get install" in done.stderr
    assert "Traceback" not in done.stderr and "Py4J" not in done.stderr
    env["JAVA_HOME"] = str(tmp_path)   # a folder without bin/java
    done = subprocess.run([sys.executable, "-m", "hopsml.cli", "prep", "tabular", str(csv), "t", "--label", "b"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "holds no bin/java" in done.stderr and "Traceback" not in done.stderr


def test_output_piped_into_head_ends_quietly(root, tmp_path):
    settings = config.load()
    for run_id in range(1, 700):
        _record(settings, run_id, state="FINISHED", metric=run_id / 1000)
    command = f"{sys.executable} -m hopsml.cli experiments list | head -n 2"
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOPSML_LOG_DIR": str(tmp_path)})
    assert len(done.stdout.splitlines()) == 2
    assert "BrokenPipeError" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_show_prints_a_traceback_as_lines(root, capsys):
    settings = config.load()
    trace = 'Traceback (most recent call last):\n  File "train.py", line 3, in train\nValueError: lr too high\n'
    exp_id = _record(settings, 1, state="FAILED", error="ValueError: lr too high", traceback=trace)
    assert cli.main(["experiments", "show", exp_id]) == 0
    out = capsys.readouterr().out
    assert "traceback:\nTraceback (most recent call last):\n  File \"train.py\", line 3, in train\n" in out
    assert "\\n" not in out
