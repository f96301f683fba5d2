"""What shipping the environment costs a cluster run: a 2-rank allreduce on a Spark standalone cluster (a master
and two 1-core workers started with spark-class on this host), from the driver's start to its result, with the
executors running a Python that has hopsml installed against the same environment packed and shipped by hopsml
(first run: packed, shipped and unpacked; second run: the archive found, shipped and unpacked again).

    python -m venv /tmp/env && /tmp/env/bin/pip install .     # an environment that can be packed (not -e)
    python bench/env_startup.py --python /tmp/env/bin/python --runs 3

Each mode starts a fresh driver process per run (one SparkContext each), interleaved; medians are shown.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))

from spark_daemons import Daemon, stop_all  # the cluster tests' spark-class daemons

DRIVER = textwrap.dedent("""
    import numpy as np
    from hopsml import collective, experiment

    def train():
        values = np.full(4, collective.rank() + 1.0)
        collective.allreduce(values)
        return {"sum": float(values[0])}

    assert experiment.allreduce(train, num_workers=2, name="startup", timeout_s=300)[1]["sum"] == 3.0
""")


def _cluster(folder: Path) -> tuple[str, list[Daemon]]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(folder), "SPARK_NO_DAEMONIZE": "1"}
    env.pop("SPARK_CONF_DIR", None)
    master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                               "--webui-port", "0"], env, folder)
    daemons = [master]
    url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)").group(1)
    for i in range(2):
        daemons.append(Daemon(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                              "--port", "0", "--webui-port", "0", "--cores", "1", "--memory", "1g",
                                              "--work-dir", str(folder / f"worker-{i}")], env, folder))
    for worker in daemons[1:]:
        worker.wait_for(r"Successfully registered with master")
    return url, daemons


def _run(python: str, url: str, root: Path, shipped: bool) -> float:
    conf = ('{"spark.executor.cores": "1", "spark.cores.max": "2", "spark.executor.memory": "512m", '
            '"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false"}')
    env = {**os.environ, "HOPSML_MASTER": url, "HOPSML_ROOT": str(root), "HOPSML_SHARED_ROOT": "true",
           "HOPSML_SPARK_CONF": conf, "HOPSML_SHIP_ENVIRONMENT": "true" if shipped else "false"}
    for name in ("PYSPARK_PYTHON", "PYTHONPATH", "HOPSML_CONF"):
        env.pop(name, None)
    if not shipped:
        env["PYSPARK_PYTHON"] = python   # the executors' Python has hopsml installed
    started = time.perf_counter()
    done = subprocess.run([python, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise SystemExit(f"the driver failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="the Python of a venv with hopsml installed (not -e)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each mode (after the first shipped one)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="hopsml-bench-startup-"))
    url, daemons = _cluster(folder)
    try:
        root = folder / "root"
        first = _run(args.python, url, root, shipped=True)   # packs the environment into the project
        installed, shipped = [], []
        for _ in range(args.runs):
            installed.append(_run(args.python, url, root, shipped=False))
            shipped.append(_run(args.python, url, root, shipped=True))
    finally:
        stop_all(daemons)
        shutil.rmtree(folder, ignore_errors=True)
    base = statistics.median(installed)
    print("2-rank allreduce on a standalone cluster, driver start to result (seconds, median of "
          f"{args.runs} interleaved runs)")
    print(f"  hopsml installed on the executors      {base:7.1f}")
    print(f"  shipped, first run (packs the archive) {first:7.1f}  {first / base:5.2f}x")
    print(f"  shipped, archive found                 {statistics.median(shipped):7.1f}  "
          f"{statistics.median(shipped) / base:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
