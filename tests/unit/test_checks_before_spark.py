"""Mistakes an experiment verb can see in its arguments fail in a fresh process before Spark starts."""

import subprocess
import sys

SCRIPT = """
import sys
from pyspark import SparkContext
from hopsml import experiment
from hopsml.errors import HopsmlError

calls = [
    lambda: experiment.launch(lambda: 1.0, name="a/b"),
    lambda: experiment.allreduce(lambda: 1.0, name="x" * 300, num_workers=2),
    lambda: experiment.grid_search(lambda lr: 1.0, {"lr": [0.1]}, name="ok", versioned_resources=["/no/such/file"]),
]
for call in calls:
    try:
        call()
    except HopsmlError as exc:
        print(type(exc).__name__, str(exc)[:60])
    else:
        sys.exit("no error")
print("spark started:", SparkContext._active_spark_context is not None)
"""


def test_bad_names_and_missing_resources_fail_before_a_spark_session_exists(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={"HOPSML_ROOT": str(tmp_path / "root"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("InvalidNameError invalid experiment name 'a/b'")
    assert lines[1].startswith("InvalidNameError invalid experiment name")
    assert lines[2].startswith("ResourceNotFoundError versioned resource(s) not found: /no/such/file")
    assert lines[3] == "spark started: False"
