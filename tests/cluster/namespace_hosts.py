"""Two hosts on one machine for the cluster tests: a Spark standalone cluster whose two workers each run in
a network namespace and a UTS namespace of their own (their own interfaces, addresses and host names),
joined by a bridge in the test's namespace, where the master and the driver run. Needs Linux, root,
iproute2 and unshare; `available()` says whether this machine has them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from spark_daemons import Daemon, java_missing, stop_all
from standalone_cluster import standalone_cluster

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
        # `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts: each host's name resolves from the file, as
        # on a cluster, instead of by a DNS query that the namespace cannot send (Java asks for its own name at start)
        names = "".join(f"{address} hopsml-host-{i}\n" for i, address in enumerate(self._addresses))
        for ns in self.namespaces:
            folder = Path("/etc/netns") / ns
            folder.mkdir(parents=True, exist_ok=True)
            self._cleanup.append(["rm", "-rf", str(folder)])
            (folder / "hosts").write_text(f"127.0.0.1 localhost\n{names}")

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


def available() -> bool:
    return (sys.platform.startswith("linux") and os.geteuid() == 0 and shutil.which("ip") is not None
            and shutil.which("unshare") is not None)


@contextmanager
def two_host_cluster(tmp_path: Path, worker_bins: Sequence[str] = ()) -> Iterator[tuple[str, dict[str, str], Hosts]]:
    """spark://<bridge address>:<port> with one 2-core worker on each of two namespace hosts; `worker_bins`
    puts a folder first on each worker's PATH (host i gets the i-th), so each can have a `python3` of its own."""
    if java_missing():
        pytest.skip("a Spark standalone cluster needs Java (java on PATH or JAVA_HOME)")
    if not available():
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


@contextmanager
def two_hosts_or_this_one(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], str, bool]]:
    """(master URL, the daemons' environment, the driver's address, whether each worker is a host of its own):
    two namespace hosts where this machine can make them, else two 1-core workers on this one."""
    if available():
        with two_host_cluster(tmp_path) as (url, env, hosts):
            yield url, env, hosts.gateway, True
    else:
        with standalone_cluster(tmp_path) as (url, env):
            yield url, env, "127.0.0.1", False


@pytest.fixture(name="cluster")
def cluster_fixture(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], str, bool]]:
    """`two_hosts_or_this_one` as the fixture `cluster`; a test module takes it with `from namespace_hosts import
    cluster_fixture` (tests/cluster has no conftest.py: a folder sorting before tests/conftest.py must not)."""
    with two_hosts_or_this_one(tmp_path) as found:
        yield found


def driver_env(url: str, env: dict[str, str], driver_host: str, tmp_path: Path, project: str,
               **spark_conf: str) -> dict[str, str]:
    """The environment of a driver program for the cluster at `url`: the driver on `driver_host` (the bridge's
    address, or 127.0.0.1 for workers on this host), one project root shared by every host, this process's
    Python for the executors, executors of 2 cores unless `spark_conf` says otherwise."""
    conf = {"spark.executor.memory": "512m", "spark.executor.cores": "2", "spark.cores.max": "4",
            "spark.driver.host": driver_host, "spark.driver.bindAddress": driver_host,
            "spark.ui.enabled": "false", **spark_conf}
    environment = {**env, "HOPSML_MASTER": url, "HOPSML_ROOT": f"file://{tmp_path / 'root'}",
                   "HOPSML_SHARED_ROOT": "true", "HOPSML_PROJECT": project,
                   "HOPSML_LOG_DIR": str(tmp_path / "spark-logs"), "HOPSML_SPARK_CONF": json.dumps(conf)}
    for name in ("PYSPARK_GATEWAY_PORT", "HOPSML_CONF", "SPARK_LOCAL_IP", "HOPSML_COLLECTIVE_SHM",
                 "HOPSML_NETWORK_INTERFACE"):
        environment.pop(name, None)
    return environment
