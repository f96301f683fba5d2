"""Cluster safety without a cluster: the root check, the network settings and where sockets bind."""

import os
import socket
import subprocess
import sys
import threading

import pytest

from hopsml import config
from hopsml.cluster import auth, session
from hopsml.cluster.ports import FrameworkPorts
from hopsml.collective import transport
from hopsml.errors import ClusterError, CollectiveError, SettingsError
from hopsml.launcher.channel import DriverChannel, TaskChannel
from hopsml.net import Network, interface_address


@pytest.fixture(autouse=True)
def outside_the_repo(tmp_path, monkeypatch):
    """./conf/hopsml.toml of the working directory is a source: run away from the repo's one."""
    monkeypatch.chdir(tmp_path)


def _settings(**overrides):
    return config.load({}, **overrides)


@pytest.mark.parametrize("root", ["/data/hopsml", "~/hopsml", "file:///mnt/hopsml"])
@pytest.mark.parametrize("master", ["spark://10.0.0.1:7077", "yarn", "k8s://https://api:6443"])
def test_a_local_root_is_refused_with_a_cluster_master(root, master):
    with pytest.raises(SettingsError, match=r"local folder.*hdfs://.*s3://.*shared_root = true") as caught:
        session.check_root(_settings(root=root), master)
    assert master in str(caught.value) and "argument" in str(caught.value)


@pytest.mark.parametrize("master", ["local", "local[4]", "local[*]", "local-cluster[2,1,1024]"])
def test_a_local_root_is_fine_with_a_local_master(master):
    session.check_root(_settings(root="/data/hopsml"), master)


@pytest.mark.parametrize("root", ["hdfs://nn:8020/user/me", "s3://bucket/hopsml"])
def test_remote_roots_and_shared_roots_are_fine_with_a_cluster_master(root):
    session.check_root(_settings(root=root), "spark://10.0.0.1:7077")
    session.check_root(config.load({"HOPSML_SHARED_ROOT": "true"}, root="file:///nfs/hopsml"), "yarn")


def test_refused_before_spark_starts(tmp_path):
    """In a fresh process (this one may run a Spark session already): no JVM is started for nothing."""
    program = (
        "import pyspark\n"
        "from hopsml import config\n"
        "from hopsml.cluster import session\n"
        "from hopsml.errors import SettingsError\n"
        "try:\n"
        "    session.get_or_create(config.load({}, root='/data/hopsml', master='spark://127.0.0.1:1'))\n"
        "except SettingsError as error:\n"
        "    print('refused:', error)\n"
        "print('jvm:', pyspark.SparkContext._gateway is not None)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOPSML_", "PYSPARK_GATEWAY"))}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "refused: the project root '/data/hopsml'" in done.stdout and "shared_root" in done.stdout
    assert "jvm: False" in done.stdout


def test_executor_environment_is_set_only_for_a_local_master(monkeypatch, tmp_path):
    for name in ("PYSPARK_PYTHON", "SPARK_CONF_DIR", "SPARK_LOCAL_IP", "HOPSML_LOG_DIR"):
        monkeypatch.delenv(name, raising=False)
    session._prepare_environment(_settings(master="spark://10.0.0.1:7077", log_dir=str(tmp_path)))
    assert "PYSPARK_PYTHON" not in os.environ
    assert "SPARK_CONF_DIR" not in os.environ
    session._prepare_environment(_settings(master="local[2]", log_dir=str(tmp_path)))
    assert os.environ["SPARK_CONF_DIR"] == session.conf_dir()
    assert os.environ["PYSPARK_PYTHON"]


def test_network_settings_parse_and_default_to_no_change():
    defaults = _settings()
    assert (defaults.shared_root, defaults.network_interface, defaults.port_range) == (False, "", None)
    settings = config.load({"HOPSML_PORT_RANGE": " 40000-40100 ", "HOPSML_NETWORK_INTERFACE": "ib0",
                            "HOPSML_SHARED_ROOT": "yes"})
    assert (settings.shared_root, settings.network_interface, settings.port_range) == (True, "ib0", (40000, 40100))
    assert config.load({}, port_range=[5000, 5001]).port_range == (5000, 5001)
    assert config.load({}, network_interface="10.1.2.3").network_interface == "10.1.2.3"


@pytest.mark.parametrize("name, raw", [("port_range", "40000"), ("port_range", "41000-40000"),
                                       ("port_range", "0-10"), ("port_range", "a-b"),
                                       ("network_interface", "eth 0"), ("shared_root", "maybe")])
def test_bad_network_settings_name_the_setting(name, raw):
    with pytest.raises(SettingsError, match=rf"{name}=.*environment variable HOPSML_{name.upper()}"):
        config.load({f"HOPSML_{name.upper()}": raw})


def test_interface_address():
    loopback = next(n for _, n in socket.if_nameindex() if n == "lo")
    assert interface_address(loopback) == "127.0.0.1"
    assert interface_address("127.0.0.1") == "127.0.0.1"
    with pytest.raises(ClusterError, match=r"'nosuch9' .*does not exist.*lo"):
        interface_address("nosuch9")
    assert Network("lo").host("10.9.9.9") == "127.0.0.1"
    assert Network().host("10.9.9.9") == "10.9.9.9"


def _free_range(size):
    """A range of `size` ports that are free now (looked for around a kernel-chosen port)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            low = probe.getsockname()[1]
        if low + size > 65535:
            continue
        socks = []
        try:
            for port in range(low, low + size):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return low, low + size - 1
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    pytest.skip("no free run of ports found")


def test_every_listener_takes_ports_of_the_range_and_says_when_it_is_full():
    low, high = _free_range(4)
    listener, address = transport.listen("127.0.0.1", (low, high))
    channel = DriverChannel("127.0.0.1", auth.new_secret(), lambda m, c: None, port_range=(low, high))
    ports = FrameworkPorts.reserve("127.0.0.1", with_master=True, port_range=(low, high))
    try:
        taken = {transport.parse_address(address)[1], channel.address[1], ports.framework_port, ports.master_port}
        assert taken == set(range(low, high + 1))
        with pytest.raises(CollectiveError, match=rf"no free port .* in {low}-{high} .*port_range.*Widen"):
            transport.listen("127.0.0.1", (low, high))
        with pytest.raises(ClusterError, match="the driver channel"):
            DriverChannel("127.0.0.1", auth.new_secret(), lambda m, c: None, port_range=(low, high))
    finally:
        listener.close()
        channel.close()
        ports.release()


def test_a_channel_in_a_port_range_carries_messages():
    low, high = _free_range(2)
    got = threading.Event()
    secret = auth.new_secret()
    channel = DriverChannel("127.0.0.1", secret, lambda message, connection: got.set(), port_range=(low, high))
    try:
        task = TaskChannel.connect(channel.address, secret, timeout_s=5)
        task.send({"kind": "output", "line": "hi"})
        assert got.wait(10)
        task.close()
    finally:
        channel.close()


def test_gloo_and_nccl_follow_the_interface(monkeypatch):
    from hopsml.launcher.task.rank import export_interface

    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.setenv(name, "")  # records the variable's state, so what export_interface sets is undone
        monkeypatch.delenv(name)
    export_interface(Network("10.0.0.5"))
    assert "GLOO_SOCKET_IFNAME" not in os.environ
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    export_interface(Network("eth1"))
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth1" and os.environ["NCCL_SOCKET_IFNAME"] == "ib0"
