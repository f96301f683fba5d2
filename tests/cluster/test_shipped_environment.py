"""A cluster runs what the notebook runs: on a Spark standalone cluster of two hosts (two workers on this one
where namespaces cannot be made) whose executors' own Python has no hopsml, a session hopsml starts packs the
driver's venv into the project once and ships it; a 2-rank allreduce and a 4-trial grid search run in it,
importing a module from the notebook's folder, and a second session finds the archive instead of packing
again."""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import namespace_hosts
import pytest
from spark_daemons import run_driver
from standalone_cluster import standalone_cluster
from venvs import driver_venv

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


@pytest.fixture
def cluster(tmp_path):
    """Two namespace hosts where this machine can make them, else two workers on this one; either way the
    workers' own python3 has nothing installed, so only a shipped environment can run hopsml there. Yields
    the master's URL, the daemons' environment, the driver's address, the workers' folders and the bare
    python3."""
    bare = tmp_path / "workers-python"
    venv.EnvBuilder(with_pip=False).create(bare)
    if namespace_hosts.available():
        with namespace_hosts.two_host_cluster(tmp_path, worker_bins=[str(bare / "bin")] * 2) as (url, env, hosts):
            yield url, env, hosts.gateway, str(tmp_path / "work-"), bare / "bin" / "python3"
    else:
        with standalone_cluster(tmp_path, bare_python=True) as (url, env):
            yield url, env, "127.0.0.1", str(tmp_path / "worker-"), bare / "bin" / "python3"


def test_the_executors_run_the_shipped_environment_of_the_driver(cluster, tmp_path):
    url, env, driver_host, work_dirs, bare = cluster
    nothing = subprocess.run([str(bare), "-c", "import numpy"], capture_output=True, env={"PATH": env["PATH"]})
    assert nothing.returncode != 0, "the workers' own Python has packages: this test would prove nothing"
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    (notebook / "model_def.py").write_text("def scale(x):\n    return 10.0 * x + 1.0\n")
    python = driver_venv(tmp_path / "venv")
    root = tmp_path / "root"
    spark_conf = {"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
                  "spark.driver.host": driver_host, "spark.driver.bindAddress": driver_host,
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
        assert result["executable"].startswith(work_dirs)                         # unpacked by a worker
        assert all(r["executable"].endswith("/environment/bin/python") for r in result["ranks"]), result
        assert result["scaled"] == 1.0                                            # rank 0's model_def call
    if namespace_hosts.available():   # one rank on each host
        assert sorted(r["host"] for r in ranks["ranks"]) == ["hopsml-host-0", "hopsml-host-1"], ranks
    assert steps["grid"]["best"] == {"lr": 4.0}
    environments = root / "Projects" / "shipped" / "Resources" / "environments"
    archives = sorted(p.name for p in environments.iterdir())
    assert len(archives) == 2 and archives[0].endswith(".json") and archives[1].endswith(".tar.gz"), archives
    assert log.count("packing the venv") == 1, "the second session packed the environment again"
    record = json.loads(Path(steps["again"]["logdir"], "experiment.json").read_text())
    fingerprint = archives[1].removesuffix(".tar.gz")
    assert record["python_environment"]["fingerprint"] == fingerprint
    assert record["python_environment"]["archive"].endswith(str(environments / archives[1]))

