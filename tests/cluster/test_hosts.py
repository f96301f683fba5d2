"""The hierarchical all-reduce across real hosts: a Spark standalone cluster whose two workers each run in
a network namespace and a UTS namespace of their own (namespace_hosts.py). Each worker has two cores, so
each "host" runs two ranks: they share memory, and the hosts' leaders talk over TCP through the bridge.
Needs root (namespaces, veth pairs) and iproute2; skipped otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from namespace_hosts import Hosts, driver_env, two_host_cluster
from own_processes import processes_mapping_segments
from spark_daemons import run_driver
from venvs import worker_bin

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
@pytest.fixture
def two_hosts(tmp_path):
    with two_host_cluster(tmp_path) as cluster:
        yield cluster


def _driver_env(url: str, env: dict[str, str], hosts: Hosts, tmp_path: Path, project: str,
                **spark_conf: str) -> dict[str, str]:
    return driver_env(url, env, hosts.gateway, tmp_path, project, **spark_conf)


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

    # A view's training dataset made by the executors (the Spark engine: no training row reached the driver's
    # Python), read by the 4 ranks where it lies, each its own shard: the train split's rows once.
    made = steps["training_dataset"]
    assert made["seen_by_driver"] == 0, made["seen_by_driver"]
    read = made["read"]
    assert sorted(read) == ["0", "1", "2", "3"] and all(read.values()), {k: len(v) for k, v in read.items()}
    every = [tx for rank in read.values() for tx in rank]
    assert len(every) == len(set(every)) == made["train_rows"] > 0


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
