"""The hierarchical all-reduce across real hosts: a Spark standalone cluster whose two workers each run in
a network namespace and a UTS namespace of their own (their own interfaces, addresses and host names),
joined by a bridge in the test's namespace, where the master and the driver run.

Each worker has two cores, so each "host" runs two ranks: they share memory, and the hosts' leaders talk
over TCP through the bridge. Needs root (namespaces, veth pairs) and iproute2; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from own_processes import processes_mapping_segments
from spark_daemons import Daemon, java_missing, run_driver, stop_all
from venvs import worker_bin

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
RANK_INTERFACE = "hmveth"  # the veth end inside each host's namespace


class Hosts:
    """Network namespaces joined by a bridge; `address(i)` is host i's, `gateway` the bridge's (this side)."""

    def __init__(self, count: int) -> None:
        tag = f"{os.getpid() % 100000}"
        subnet = 10 + os.getpid() % 200
        self.bridge = f"hmbr{tag}"
        self.namespaces = [f"hopsml-test-{tag}-{i}" for i in range(count)]
        self.gateway = f"10.231.{subnet}.1"
        self._addresses = [f"10.231.{subnet}.{i + 2}" for i in range(count)]
        self._cleanup: list[list[str]] = []
        try:
            self._build()
        except OSError:
            self.remove()  # what was made before the step that failed
            raise

    def _build(self) -> None:
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._cleanup.append(["ip", "link", "del", self.bridge])
        self._ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            outside = f"{self.bridge}x{i}"  # at most 15 characters, as Linux wants
            self._ip("netns", "add", ns)
            self._cleanup.append(["ip", "netns", "del", ns])
            self._ip("link", "add", outside, "type", "veth", "peer", "name", RANK_INTERFACE, "netns", ns)
            self._cleanup.append(["ip", "link", "del", outside])  # both ends, at once
            self._ip("link", "set", outside, "master", self.bridge)
            self._ip("link", "set", outside, "up")
            self._ip("-n", ns, "addr", "add", f"{self._addresses[i]}/24", "dev", RANK_INTERFACE)
            self._ip("-n", ns, "link", "set", RANK_INTERFACE, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")

    @staticmethod
    def _ip(*args: str) -> None:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
        if done.returncode:
            raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def address(self, i: int) -> str:
        return self._addresses[i]

    def prefix(self, i: int) -> list[str]:
        """A command prefix that runs a program on host i: in its network namespace, with its own host name."""
        return ["ip", "netns", "exec", self.namespaces[i], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', f"hopsml-host-{i}"]

    def remove(self) -> None:
        for command in reversed(self._cleanup):
            subprocess.run(command, capture_output=True, timeout=30)


@contextmanager
def two_host_cluster(tmp_path: Path, worker_bins: Sequence[str] = ()) -> Iterator[tuple[str, dict[str, str], Hosts]]:
    """spark://<bridge address>:<port> with one 2-core worker on each of two namespace hosts; `worker_bins`
    puts a folder first on each worker's PATH (host i gets the i-th), so each can have a `python3` of its own."""
    if java_missing():
        pytest.skip("a Spark standalone cluster needs Java (java on PATH or JAVA_HOME)")
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not (shutil.which("ip") and
                                                                         shutil.which("unshare")):
        pytest.skip("hosts in network namespaces need Linux, root, iproute2 and unshare")
    try:
        hosts = Hosts(2)
    except OSError as exc:
        pytest.skip(f"cannot make network namespaces here: {exc}")
    logs = tmp_path / "daemons"
    logs.mkdir()
    env = {**os.environ, "SPARK_LOG_DIR": str(logs), "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_CONF_DIR", None)
    daemons: list[Daemon] = []
    try:
        master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", hosts.gateway, "--port", "0",
                                   "--webui-port", "0"], {**env, "SPARK_LOCAL_IP": hosts.gateway}, logs)
        daemons.append(master)
        url = master.wait_for(r"Starting Spark master at (spark://[\d.]+:\d+)").group(1)
        for i in range(2):
            worker_env = {**env, "SPARK_LOCAL_IP": hosts.address(i)}
            if worker_bins:
                worker_env["PATH"] = f"{worker_bins[i]}{os.pathsep}{env['PATH']}"
            daemons.append(Daemon(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", url, "--host",
                                                  hosts.address(i), "--port", "0", "--webui-port", "0", "--cores",
                                                  "2", "--memory", "1g", "--work-dir", str(tmp_path / f"work-{i}")],
                                  worker_env, logs, prefix=hosts.prefix(i)))
        for worker in daemons[1:]:
            worker.wait_for(r"Successfully registered with master")
        yield url, env, hosts
    finally:
        stop_all(daemons)
        hosts.remove()


@pytest.fixture
def two_hosts(tmp_path):
    with two_host_cluster(tmp_path) as cluster:
        yield cluster


def _driver_env(url: str, env: dict[str, str], hosts: Hosts, tmp_path: Path, project: str,
                **spark_conf: str) -> dict[str, str]:
    conf = {"spark.executor.memory": "512m", "spark.executor.cores": "2", "spark.cores.max": "4",
            "spark.driver.host": hosts.gateway, "spark.driver.bindAddress": hosts.gateway,
            "spark.ui.enabled": "false", **spark_conf}
    driver_env = {**env, "HOPSML_MASTER": url, "HOPSML_ROOT": f"file://{tmp_path / 'root'}",
                  "HOPSML_SHARED_ROOT": "true", "HOPSML_PROJECT": project,
                  "HOPSML_LOG_DIR": str(tmp_path / "spark-logs"), "HOPSML_SPARK_CONF": json.dumps(conf)}
    for name in ("PYSPARK_GATEWAY_PORT", "HOPSML_CONF", "SPARK_LOCAL_IP", "HOPSML_COLLECTIVE_SHM",
                 "HOPSML_NETWORK_INTERFACE"):
        driver_env.pop(name, None)
    return driver_env


def _mapping_segments(wait_s: float = 20.0) -> list[int]:
    """The test's processes (the Spark daemons it started and their executors) that still map a shared segment
    of hopsml's, once none does or after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        found = processes_mapping_segments()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def test_ranks_on_two_hosts_share_memory_within_a_host_and_meet_over_tcp_between_hosts(two_hosts, tmp_path):
    url, env, hosts = two_hosts
    driver_env = _driver_env(url, env, hosts, tmp_path, "hosts", **{"spark.pyspark.python": sys.executable})
    returncode, steps, log = run_driver(HERE / "hosts_driver.py", driver_env, tmp_path)
    assert returncode == 0, f"driver failed ({returncode}):\n{log}"

    # Two ranks on each host, each host named as its namespace says, rank 0's address on the bridge.
    results = steps["hierarchical"]["results"]
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    by_host: dict[str, list[int]] = {}
    for r in results:
        by_host.setdefault(r["hostname"], []).append(r["rank"])
    assert sorted(by_host) == ["hopsml-host-0", "hopsml-host-1"] and all(len(v) == 2 for v in by_host.values())
    assert {r["master_addr"] for r in results} <= {hosts.address(0), hosts.address(1)}

    # Memory is shared with the other rank on the same host only; large all-reduces are hierarchical.
    for r in results:
        same_host = [x for x in by_host[r["hostname"]] if x != r["rank"]]
        assert r["shared_memory_peers"] == same_host, r
        assert r["allreduce_path"] == "hierarchical", r
    # Every rank got the exact sums, large (host segments + leaders' ring) and small (one exchange).
    for r in results:
        assert r["large"] == [10.0, 10.0 * (1 << 20)], r
        assert r["small"] == 10.0 and r["mean"] == 2.5, r

    # A rank killed on one host: the run fails naming it, and no process keeps shared memory of the runs.
    failed = steps["killed"]
    assert failed["error"] and "rank 3 died" in failed["error"], failed
    assert "rank 3 about to vanish" in failed["error"]  # its own last lines
    assert _mapping_segments() == []


OTHER_NUMPY_DRIVER = """
import json

from hopsml import experiment
from hopsml.errors import ExecutorStackError


def train():
    return {"ran": True}


try:
    experiment.allreduce(train, name="other-numpy", num_workers=4, timeout_s=120)
    print(json.dumps({"step": "allreduce", "error": None}), flush=True)
except ExecutorStackError as exc:
    print(json.dumps({"step": "allreduce", "error": str(exc)}), flush=True)
"""


def test_a_host_whose_python_has_another_numpy_is_refused_before_any_rank_starts(tmp_path):
    import numpy

    bins = [worker_bin(tmp_path / "python-0"), worker_bin(tmp_path / "python-1", numpy_version="1.0.0")]
    with two_host_cluster(tmp_path, worker_bins=bins) as (url, env, hosts):
        # nothing shipped, no PYSPARK_PYTHON: each executor runs its own host's python3
        driver_env = _driver_env(url, env, hosts, tmp_path, "other-numpy")
        driver_env.update(HOPSML_SHIP_ENVIRONMENT="false")
        driver_env.pop("PYSPARK_PYTHON")
        script = tmp_path / "other_numpy_driver.py"
        script.write_text(OTHER_NUMPY_DRIVER)
        returncode, steps, log = run_driver(script, driver_env, tmp_path)
    assert returncode == 0, f"driver failed ({returncode}):\n{log}"
    error = steps["allreduce"]["error"]
    assert error is not None, "the ranks ran with another numpy on one host than the driver's"
    assert error.startswith("executor hopsml-host-1 runs another Python stack"), error   # the host, by its name
    differences = error.split("did not start: ")[1].split(". Its Python")[0]
    assert differences == f"numpy 1.0.0 (the driver has {numpy.__version__})"           # and nothing else
    assert f"{bins[1]}/python3" in error                                                 # which Python there
    root = tmp_path / "root"
    (record,) = [json.loads(p.read_text()) for p in root.rglob("experiment.json")]
    assert record["state"] == "FAILED"
    assert not list(root.rglob("worker_*.log")), "a rank ran"
