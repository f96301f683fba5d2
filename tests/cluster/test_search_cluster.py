"""Searches on a cluster of two hosts (network namespaces of their own where this machine can make them, else
two workers of this one), 2 slots each: ASHA's single-rank trials run in slot tasks on both hosts and promote
as on one; a grid search of 2-rank trials packs two trials at once on the 4 slots, and a trial whose rank
raises or dies on its host fails alone and named while the others finish."""

from __future__ import annotations

import sys
from pathlib import Path

import namespace_hosts
import pytest
from namespace_hosts import cluster_fixture  # noqa: F401 - the fixture `cluster`
from spark_daemons import run_driver

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


def test_asha_and_distributed_trials_spread_over_two_hosts_and_a_failing_rank_fails_its_trial_alone(cluster, tmp_path):
    url, env, driver_host, own_hosts = cluster
    conf = {"spark.pyspark.python": sys.executable} if own_hosts else {
        "spark.executor.cores": "1", "spark.cores.max": "2", "spark.pyspark.python": sys.executable}
    driver_env = namespace_hosts.driver_env(url, env, driver_host, tmp_path, "searches", **conf)
    returncode, steps, log = run_driver(HERE / "search_driver.py", driver_env, tmp_path)
    assert returncode == 0, f"driver failed ({returncode}):\n{log}"

    asha = steps["asha"]
    ended = asha["trials"]
    assert len(ended) == 12 and {t["state"] for t in ended} == {"FINISHED", "EARLY_STOPPED"}, ended
    assert asha["promotions"] >= 2   # to the middle rung and to the top
    hosts = {t["outputs"]["host"] for t in ended}
    if own_hosts:
        assert asha["parallel_trials"] == 4   # the session waited for both hosts' executors before the search
        assert hosts == {"hopsml-host-0", "hopsml-host-1"}, hosts   # the slot tasks ran on both hosts
        # one Spark job of slot tasks: each slot's worker process took trial after trial
        assert len({t["outputs"]["pid"] for t in ended}) <= asha["parallel_trials"] < len(ended)
    assert asha["best"]["q"] == max(t["params"]["q"] for t in ended if t["state"] == "FINISHED")

    distributed = steps["distributed"]
    trials = {t["params"]["x"]: t for t in distributed["trials"]}
    if own_hosts:
        assert distributed["parallel_trials"] == 2
        first_end = next(i for i, e in enumerate(distributed["jobs"]) if e["event"] == "end")
        assert first_end >= 2   # two trials of two ranks ran at once on the 4 slots
    assert trials[2]["state"] == "FAILED" and trials[2]["error"].startswith(
        "rank 1 of 2: ValueError: rank 1 cannot go on with x=2"), trials[2]
    assert trials[4]["state"] == "FAILED" and trials[4]["error"].startswith("rank 1 of 2: "), trials[4]
    for x in (1, 3):
        assert trials[x]["state"] == "FINISHED" and trials[x]["outputs"]["ranks"] == 2.0, trials[x]
    assert distributed["best"] == {"x": 3}
    placed = {host for x in (1, 3) for host in trials[x]["outputs"]["hosts"]}
    if own_hosts:
        assert placed == {"hopsml-host-0", "hopsml-host-1"}, placed   # trials' ranks ran on both hosts
