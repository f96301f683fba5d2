"""A cluster runs what the notebook runs: on a Spark standalone cluster whose executors' own Python has no
hopsml, a session hopsml starts packs the driver's venv into the project once and ships it; a 2-rank allreduce
and a 4-trial grid search run in it, importing a module from the notebook's folder, and a second session finds
the archive instead of packing again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from spark_daemons import run_driver
from standalone_cluster import standalone_cluster
from venvs import driver_venv

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


@pytest.fixture
def standalone(tmp_path):
    """The workers' own python3 has nothing installed: only a shipped environment can run hopsml there."""
    with standalone_cluster(tmp_path, bare_python=True) as cluster:
        yield cluster


def test_the_executors_run_the_shipped_environment_of_the_driver(standalone, tmp_path):
    url, env = standalone
    bare = subprocess.run(["python3", "-c", "import numpy"], capture_output=True, env={"PATH": env["PATH"]})
    assert bare.returncode != 0, "the workers' own Python has packages: this test would prove nothing"
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    (notebook / "model_def.py").write_text("def scale(x):\n    return 10.0 * x + 1.0\n")
    python = driver_venv(tmp_path / "venv")
    root = tmp_path / "root"
    spark_conf = {"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
                  "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                  "spark.ui.enabled": "false"}
    driver_env = {**env, "HOPSML_MASTER": url, "HOPSML_ROOT": f"file://{root}", "HOPSML_SHARED_ROOT": "true",
                  "HOPSML_PROJECT": "shipped", "HOPSML_LOG_DIR": str(tmp_path / "spark-logs"),
                  "HOPSML_SPARK_CONF": json.dumps(spark_conf)}
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_GATEWAY_PORT", "HOPSML_CONF", "PYTHONPATH"):
        driver_env.pop(name, None)
    script = tmp_path / "shipped_driver.py"
    script.write_text((HERE / "shipped_driver.py").read_text())
    returncode, steps, log = run_driver(script, driver_env, tmp_path,
                                        python=python, args=[str(notebook)])
    assert returncode == 0, f"driver failed ({returncode}):\n{log}"

    ranks = steps["allreduce"]["result"]
    for result in [ranks, steps["again"]["result"]]:
        assert result["executable"].endswith("/environment/bin/python"), result   # the archive's Python
        assert str(tmp_path / "worker-") in result["executable"]                  # unpacked by a worker
        assert result["scaled"] == 1.0                                            # rank 0's model_def call
    assert steps["grid"]["best"] == {"lr": 4.0}
    environments = root / "Projects" / "shipped" / "Resources" / "environments"
    archives = sorted(p.name for p in environments.iterdir())
    assert len(archives) == 2 and archives[0].endswith(".json") and archives[1].endswith(".tar.gz"), archives
    assert log.count("packing the venv") == 1, "the second session packed the environment again"
    record = json.loads(Path(steps["again"]["logdir"], "experiment.json").read_text())
    fingerprint = archives[1].removesuffix(".tar.gz")
    assert record["python_environment"]["fingerprint"] == fingerprint
    assert record["python_environment"]["archive"].endswith(str(environments / archives[1]))

