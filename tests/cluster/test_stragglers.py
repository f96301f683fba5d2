"""Stragglers named across hosts: a 2-rank allreduce with one rank on each of two hosts (network namespaces of
their own where this machine can make them, else two workers of this one), where rank 1 waits 40 ms longer for
each batch, names rank 1 with the cause 'input' in its record; a balanced run names none. The ranks' clocks are
aligned to the driver's over the bridge, and each host's network traffic shows in its rank's system metrics. On
namespace hosts, 4 ranks (two on each) name their slowed rank too."""

from __future__ import annotations

import sys
from pathlib import Path

import namespace_hosts
import pytest
from namespace_hosts import cluster_fixture  # noqa: F401 - the fixture `cluster`
from spark_daemons import run_driver

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


def test_the_slow_rank_on_another_host_is_named_with_its_cause_and_a_balanced_run_names_none(cluster, tmp_path):
    url, env, driver_host, own_hosts = cluster
    driver_env = namespace_hosts.driver_env(url, env, driver_host, tmp_path, "stragglers",
                                            **{"spark.executor.cores": "1", "spark.cores.max": "2",
                                               "spark.pyspark.python": sys.executable})
    returncode, steps, log = run_driver(HERE / "stragglers_driver.py", driver_env, tmp_path)
    assert returncode == 0, f"driver failed ({returncode}):\n{log}"

    slowed, balanced = steps["slowed"], steps["balanced"]
    for run in (slowed, balanced):
        hosts = [r["host"] for r in run["results"]]
        assert len(set(hosts) if own_hosts else hosts) == 2, hosts   # one rank on each host
        assert run["results"][0]["total"] == 2 * sum(range(30))
        assert run["clock_error_bound_us"] is not None
    if own_hosts:
        assert sorted(r["host"] for r in slowed["results"]) == ["hopsml-host-0", "hopsml-host-1"]

    (named,) = slowed["stragglers"]["named"]
    assert (named["rank"], named["cause"]) == (1, "input") and named["late_ms"] >= 20, named
    assert named["message"].startswith("rank 1 is a straggler: last into ")
    assert slowed["median_wait_us"]["0"] > 20_000 > slowed["median_wait_us"]["1"]  # rank 0 waits for rank 1
    assert balanced["stragglers"]["named"] == [] and balanced["stragglers"]["ops_compared"] >= 10, balanced

    peaks = slowed["system"]["peaks"]
    assert set(peaks) == {"0", "1"} and all(p["rss_mib"] > 0 for p in peaks.values())
    if not own_hosts:
        return
    # each host counts its own interface: the 8 MiB all-reduce crossed the bridge both ways
    assert all(p["net_sent_mib"] >= 2 and p["net_recv_mib"] >= 2 for p in peaks.values()), peaks

    # 4 ranks, two on each host (sharing memory there): rank 2 waits longer for input and is the one named
    driver_env = namespace_hosts.driver_env(url, env, driver_host, tmp_path, "stragglers-of-4",
                                            **{"spark.pyspark.python": sys.executable})
    returncode, steps, log = run_driver(HERE / "stragglers_driver.py", driver_env, tmp_path, args=["4"])
    assert returncode == 0, f"driver failed ({returncode}):\n{log}"
    four = steps["slowed-of-4"]
    hosts = [r["host"] for r in four["results"]]
    assert sorted(hosts) == ["hopsml-host-0"] * 2 + ["hopsml-host-1"] * 2, hosts
    assert [(n["rank"], n["cause"]) for n in four["stragglers"]["named"]] == [(2, "input")], four["stragglers"]
    assert all(four["median_wait_us"][r] > 20_000 for r in ("0", "1", "3")) and four["median_wait_us"]["2"] < 20_000
