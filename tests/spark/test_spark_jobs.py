"""Every spark_jobs script runs to the end under a real spark-submit and exits with its status.

Spark 3.5 leaves a non-daemon barrier timer thread in a local-mode JVM, which kept spark-submit up
forever after any barrier stage; hopsml stops it when the Python program exits.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hopsml.data import samples

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "spark_jobs"
LIMIT_S = 600  # a hang, not a slow run: the jobs below take well under a minute each here

pytestmark = pytest.mark.slow


def spark_submit(tmp_path: Path, script: str, *args: str, master: str = "local[4]") -> subprocess.CompletedProcess:
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "HOPSML_ROOT": str(tmp_path / "root"), "HOPSML_PROJECT": "jobs",
           "HOPSML_LOG_DIR": str(tmp_path / "logs"), "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [os.path.join(bin_dir, "spark-submit"), "--master", master, str(JOBS / script), *args]
    try:
        return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired as hang:
        pytest.fail(f"spark-submit {script} did not exit within {LIMIT_S} s; last output:\n"
                    f"{(hang.stdout or b'')[-2000:]!r}")


@pytest.mark.legacy  # Spark 3.5 is where the barrier timer thread lingers
def test_train_allreduce_exits_with_success(tmp_path):
    done = spark_submit(tmp_path, "train_allreduce.py", "--workers", "2", "--epochs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "accuracy" in done.stdout


def test_grid_search_exits_with_success(tmp_path):
    done = spark_submit(tmp_path, "grid_search.py", "--lr", "0.5", "--dropout", "0.0", "0.3")
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_failing_job_exits_with_failure(tmp_path):
    done = spark_submit(tmp_path, "train_allreduce.py", "--workers", "3", master="local[2]")
    assert done.returncode != 0
    assert "ClusterError: 3 workers need 3 task slots" in done.stdout  # spark-submit sends Python's stderr there


def test_data_jobs_exit_with_success(tmp_path):
    samples.write_digits(str(tmp_path / "digits"), limit=40)
    table = tmp_path / "iris.csv"
    samples.write_table(str(table))
    images = spark_submit(tmp_path, "preprocess_images.py", str(tmp_path / "digits"), "digits",
                          "--resize", "16x16", "--crop", "16x16")
    assert images.returncode == 0, images.stderr[-3000:]
    tabular = spark_submit(tmp_path, "preprocess_tabular.py", str(table), "iris", "--label", "species")
    assert tabular.returncode == 0, tabular.stderr[-3000:]


def test_quickstart_exits_with_success(tmp_path):
    done = spark_submit(tmp_path, "quickstart.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "grid search" in done.stdout


def test_torch_job_exits_with_success(tmp_path):
    pytest.importorskip("torch")
    done = spark_submit(tmp_path, "train_torch.py", "--prepare-samples", "--workers", "2", "--epochs", "1")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "accuracy" in done.stdout
    again = spark_submit(tmp_path, "train_torch.py", "--prepare-samples", "--workers", "1", "--epochs", "1")
    assert again.returncode == 0 and "dataset 'digits' (hopsml-sample:digits" in again.stdout  # the same sample
    assert "is there already: reused" in again.stdout
    manifest = tmp_path / "root" / "Projects" / "jobs" / "Datasets" / "digits" / "dataset.json"
    manifest.write_text(manifest.read_text().replace('"hopsml-sample:digits"', '"/data/my-digits"'))
    other = spark_submit(tmp_path, "train_torch.py", "--prepare-samples", "--workers", "1", "--epochs", "1")
    assert other.returncode == 1 and "dataset 'digits' already exists" in other.stdout + other.stderr
    assert "prepared from '/data/my-digits'" in other.stdout + other.stderr
    assert "Traceback" not in other.stdout + other.stderr
