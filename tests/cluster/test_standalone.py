"""hopsml on a real Spark standalone cluster: a master and two workers started with spark-class, bound
to 127.0.0.1, each worker with one core, so the two ranks of an allreduce run in two executors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from spark_daemons import run_driver
from standalone_cluster import standalone_cluster

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
PORT_RANGE = (43100, 43199)


@pytest.fixture
def standalone(tmp_path):
    with standalone_cluster(tmp_path) as cluster:
        yield cluster


def test_allreduce_on_a_standalone_cluster_with_a_shared_file_root(standalone, tmp_path):
    url, env = standalone
    root = tmp_path / "root"
    spark_conf = {"spark.pyspark.python": sys.executable, "spark.executor.memory": "512m",
                  "spark.executor.cores": "1", "spark.cores.max": "2", "spark.driver.host": "127.0.0.1",
                  "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false"}
    driver_env = {**env, "HOPSML_MASTER": url, "HOPSML_ROOT": f"file://{root}", "HOPSML_PROJECT": "cluster",
                  "HOPSML_LOG_DIR": str(tmp_path / "spark-logs"), "HOPSML_SPARK_CONF": json.dumps(spark_conf),
                  "HOPSML_NETWORK_INTERFACE": "lo", "HOPSML_PORT_RANGE": "{}-{}".format(*PORT_RANGE)}
    driver_env.pop("PYSPARK_GATEWAY_PORT", None)
    driver_env.pop("HOPSML_CONF", None)
    returncode, steps, log = run_driver(HERE / "standalone_driver.py", driver_env, tmp_path)
    assert returncode == 0, f"driver failed ({returncode}):\n{log}"

    # A local-folder root is refused before any Spark job, before even a JVM starts.
    unshared = steps["unshared"]
    assert unshared["error"] and "shared_root" in unshared["error"] and url in unshared["error"]
    assert unshared["jvm"] is False

    # Marked shared, the run goes through on the cluster: 2 ranks in 2 executors, ports from the range.
    shared = steps["shared"]
    assert shared["master"] == url
    result = shared["result"]
    assert result["sum"] == 3.0 and result["rank"] == 0
    assert result["master_addr"] == "127.0.0.1" and result["gloo_ifname"] == "lo"
    assert PORT_RANGE[0] <= result["master_port"] <= PORT_RANGE[1]
    record = json.loads(Path(shared["logdir"], "experiment.json").read_text())
    assert record["state"] == "FINISHED"
    assert [r["sum"] for r in record["results"]] == [3.0, 3.0]
    executors = [r["executor"] for r in record["results"]]
    assert None not in executors and len(set(executors)) == 2, executors
    assert Path(shared["logdir"], "logs", "worker_1.log").exists()

    # With the cluster session already active, an unshared local root is still refused, and no run starts.
    assert "shared_root" in (steps["unshared-active"]["error"] or "")
    experiments = [p for p in (root / "Projects" / "cluster" / "Experiments").iterdir() if p.is_dir()]
    assert len(experiments) == 1
