"""The Spark standalone cluster the cluster tests start: a master and two workers started with spark-class,
bound to 127.0.0.1, each worker with one core, so the two ranks of an allreduce run in two executors."""

from __future__ import annotations

import os
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from spark_daemons import Daemon, java_missing, stop_all


@contextmanager
def standalone_cluster(tmp_path: Path, bare_python: bool = False) -> Iterator[tuple[str, dict[str, str]]]:
    """spark://127.0.0.1:<port> with two 1-core workers; every process is gone after the test. With
    `bare_python`, the workers' own `python3` is a venv with nothing installed."""
    if java_missing():
        pytest.skip("a Spark standalone cluster needs Java (java on PATH or JAVA_HOME)")
    logs = tmp_path / "daemons"
    logs.mkdir()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(logs), "SPARK_NO_DAEMONIZE": "1",
           "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_CONF_DIR", None)
    if bare_python:
        bare = tmp_path / "bare-python"
        venv.EnvBuilder(with_pip=False).create(bare)
        env["PATH"] = f"{bare / 'bin'}{os.pathsep}{env['PATH']}"
        del env["PYSPARK_PYTHON"]
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
        stop_all(daemons)
