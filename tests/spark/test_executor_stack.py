"""An executor whose Python stack differs from the driver's is refused before any of the run's code runs
there, naming the host, the package and both versions (before: a ModuleNotFoundError or an unpickling error
from inside PySpark's worker). The driver is a process of the test's own: a notebook that built its own
SparkSession with another PYSPARK_PYTHON, the way the issue met it."""

import json
import os
import site
import subprocess
import sys
import textwrap
import venv

import numpy as np
import pytest

from hopsml.cluster import preflight

DRIVER = textwrap.dedent("""
    import json, os, sys
    os.environ["PYSPARK_PYTHON"] = sys.argv[1]
    from pyspark.sql import SparkSession
    SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    from hopsml import experiment
    from hopsml.errors import ExecutorStackError

    def train():
        import numpy as np
        return {"metric": float(np.ones(3).sum())}

    try:
        if sys.argv[2] == "images":
            from PIL import Image
            from hopsml.data import prepare_images
            for label in ("a", "b"):
                os.makedirs(f"pictures/{label}")
                Image.new("RGB", (8, 8)).save(f"pictures/{label}/1.png")
            prepare_images("pictures", "pictures")
        elif sys.argv[2] == "table":
            from hopsml.data import prepare_table
            with open("table.csv", "w") as f:
                f.write("x,y\\n" + "".join(f"{i}.5,{i % 2}\\n" for i in range(20)))
            prepare_table("table.csv", "table", label="y")
        elif sys.argv[2] == "launch":
            experiment.launch(train, name="stack")
        else:
            experiment.allreduce(train, num_workers=2, name="stack")
        print(json.dumps({"error": None}))
    except ExecutorStackError as exc:
        print(json.dumps({"error": str(exc)}))
""")


def _executor_python(folder, numpy_version=None):
    """A venv of its own; with `numpy_version` it sees the driver's packages, but claims another numpy."""
    venv.EnvBuilder(with_pip=False).create(folder)
    if numpy_version is None:
        return os.path.join(folder, "bin", "python")
    packages = os.path.join(folder, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
    fake = os.path.join(packages, f"numpy-{numpy_version}.dist-info")
    os.makedirs(fake)
    with open(os.path.join(fake, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: numpy\nVersion: {numpy_version}\n")
    with open(os.path.join(packages, "driver.pth"), "w") as f:  # after its own site-packages: the fake wins
        f.write("\n".join([*site.getsitepackages(), *sys.path[1:]]) + "\n")
    return os.path.join(folder, "bin", "python")


def _drive(tmp_path, python, verb, spark_conf_dir=None):
    # a table of 20 rows would be prepared in the driver: the table job's executors are what is tested
    env = {**os.environ, "HOPSML_ROOT": str(tmp_path / "root"), "HOPSML_PROJECT": "stack",
           "HOPSML_SMALL_TABLE_ROWS": "0"}
    for name in ("PYSPARK_PYTHON", "SPARK_CONF_DIR"):  # as a notebook has them, unless the test says
        env.pop(name, None)
    if spark_conf_dir:
        env["SPARK_CONF_DIR"] = spark_conf_dir
    # in its own folder: local workers start in the driver's, and a checkout there would give them hopsml
    done = subprocess.run([sys.executable, "-c", DRIVER, python, verb], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["error"], done.stderr


def _records(tmp_path):
    base = tmp_path / "root" / "Projects" / "stack" / "Experiments"
    return [json.loads((d / "experiment.json").read_text()) for d in base.iterdir() if (d / "experiment.json").exists()]


def test_an_executor_without_hopsml_is_named_with_its_python(tmp_path):
    python = _executor_python(str(tmp_path / "bare"))
    error, stderr = _drive(tmp_path, python, "launch")
    assert error is not None, "the run went on with executors that have no hopsml"
    assert "hopsml is not installed there" in error
    assert f"numpy is not installed there (the driver has {np.__version__})" in error
    assert python in error and sys.executable in error   # both interpreters, so the user sees which is wrong
    assert "PYSPARK_PYTHON" in error
    assert "No module named 'hopsml'" not in stderr
    (record,) = _records(tmp_path)
    assert record["state"] == "FAILED"


def test_executors_that_cannot_start_hopsml_s_worker_daemon_are_named_too(tmp_path):
    import shutil

    from hopsml.cluster import session

    python = _executor_python(str(tmp_path / "bare"))
    conf = tmp_path / "conf"   # hopsml's Spark conf, opted in to its worker daemon: every worker starts from it
    shutil.copytree(session.conf_dir(), conf, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    with open(conf / "spark-defaults.conf", "a") as defaults:
        defaults.write("spark.python.daemon.module  hopsml.cluster.worker_daemon\n")
    error, _ = _drive(tmp_path, python, "launch", spark_conf_dir=str(conf))
    assert error is not None and "the executors' Python cannot import hopsml" in error
    assert sys.executable in error and "PYSPARK_PYTHON" in error


def test_another_numpy_on_the_executors_stops_a_distributed_run_before_any_rank_starts(tmp_path):
    python = _executor_python(str(tmp_path / "other"), numpy_version="1.0.0")
    error, _ = _drive(tmp_path, python, "allreduce")
    assert error is not None, "ranks ran with another numpy than the driver's"
    differences = error.split("did not start: ")[1].split(". Its Python")[0]
    assert differences == f"numpy 1.0.0 (the driver has {np.__version__})"  # and nothing else differs
    (record,) = _records(tmp_path)
    assert record["state"] == "FAILED"
    assert not list((tmp_path / "root").rglob("worker_*.log")), "a rank ran"


def test_the_image_job_names_an_executor_without_its_packages(tmp_path):
    python = _executor_python(str(tmp_path / "bare"))
    error, _ = _drive(tmp_path, python, "images")
    assert error is not None, "the image job ran on executors without hopsml"
    assert "pillow is not installed there" in error and "hopsml is not installed there" in error


def test_the_table_job_names_an_executor_without_its_packages(tmp_path):
    python = _executor_python(str(tmp_path / "bare"))
    error, _ = _drive(tmp_path, python, "table")
    assert error is not None, "the table job ran on executors without hopsml"
    assert "hopsml is not installed there" in error and "pyarrow is not installed there" in error


def test_the_driver_stack_holds_the_frameworks_the_function_imports():
    def train():
        import sklearn.svm  # noqa: F401
        return np.zeros(1)

    stack = preflight.driver_stack(train)
    assert {"hopsml", "numpy", "pyarrow", "scikit-learn"} <= set(stack.packages)
    assert stack.packages["numpy"] == np.__version__
    assert not any(name in stack.packages for name in ("os", "sys", "json"))  # the standard library is the Python


@pytest.mark.parametrize("text", ["", "Py4JJavaError: something else", "hopsml-executor-stack:{not json"])
def test_an_error_without_an_executor_report_is_left_alone(text):
    assert preflight.mismatch_in(RuntimeError(text), preflight.driver_stack()) is None
