"""hopsml on a real Spark standalone cluster: a master and two workers started with spark-class, bound
to 127.0.0.1, each worker with one core, so the two ranks of an allreduce run in two executors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
START_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 420.0
PORT_RANGE = (43100, 43199)


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _java_missing() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists())


class Daemon:
    """A spark-class process in its own process group (its executors too), logging to a file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([str(_spark_class()), *args], stdout=out, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first match of `pattern` in the log, waiting at most START_TIMEOUT_S."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            match = re.search(pattern, self.log.read_text(errors="replace"))
            if match:
                return match
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"{self.name} did not log {pattern!r}; its log:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """End the whole process group (the daemon and the executors it started), SIGKILL if needed."""
        for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.process.poll()
                try:
                    os.killpg(self.process.pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.2)

    def alive(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.fixture
def standalone(tmp_path):
    """spark://127.0.0.1:<port> with two 1-core workers; every process is gone after the test."""
    if _java_missing():
        pytest.skip("a Spark standalone cluster needs Java (java on PATH or JAVA_HOME)")
    logs = tmp_path / "daemons"
    logs.mkdir()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(logs), "SPARK_NO_DAEMONIZE": "1",
           "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_CONF_DIR", None)
    daemons: list[Daemon] = []
    try:
        master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                                   "--webui-port", "0"], env, logs)
        daemons.append(master)
        url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)").group(1)
        for i in range(2):
            work_dir = tmp_path / f"worker-{i}"
            daemons.append(Daemon(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", url, "--host",
                                                  "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", "1",
                                                  "--memory", "1g", "--work-dir", str(work_dir)], env, logs))
        for worker in daemons[1:]:
            worker.wait_for(r"Successfully registered with master")
        yield url, env
    finally:
        for daemon in reversed(daemons):
            daemon.stop()
        leftovers = [d.name for d in daemons if d.alive()]
        assert not leftovers, f"still running after the test: {leftovers}"


def test_allreduce_on_a_standalone_cluster_with_a_shared_file_root(standalone, tmp_path):
    url, env = standalone
    root = tmp_path / "root"
    spark_conf = {"spark.pyspark.python": sys.executable, "spark.executor.memory": "512m",
                  "spark.executor.cores": "1", "spark.cores.max": "2", "spark.driver.host": "127.0.0.1",
                  "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false"}
    driver_env = {**env, "HOPSML_MASTER": url, "HOPSML_ROOT": f"file://{root}", "HOPSML_PROJECT": "cluster",
                  "HOPSML_LOG_DIR": str(tmp_path / "spark-logs"), "HOPSML_SPARK_CONF": json.dumps(spark_conf),
                  "HOPSML_NETWORK_INTERFACE": "lo", "HOPSML_PORT_RANGE": "%d-%d" % PORT_RANGE}
    driver_env.pop("PYSPARK_GATEWAY_PORT", None)
    driver_env.pop("HOPSML_CONF", None)
    with open(tmp_path / "driver.log", "wb") as log:
        driver = subprocess.Popen([sys.executable, str(HERE / "standalone_driver.py")], stdout=subprocess.PIPE,
                                  stderr=log, env=driver_env, cwd=tmp_path, start_new_session=True)
        try:
            out, _ = driver.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(10)
    steps = {s["step"]: s for s in map(json.loads, filter(None, out.decode().splitlines()))}
    assert driver.returncode == 0, f"driver failed ({driver.returncode}):\n{(tmp_path / 'driver.log').read_text()[-4000:]}"

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
    experiments = list((root / "Projects" / "cluster" / "Experiments").iterdir())
    assert len(experiments) == 1
