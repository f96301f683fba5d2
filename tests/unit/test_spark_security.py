"""A session on a cluster master whose Spark channels are unprotected gets one warning line that says what
it means and which settings to turn on; a local master or a protected cluster gets none."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from pyspark import SparkConf

from hopsml.cluster import session

PROTECTED = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true",
             "spark.io.encryption.enabled": "true"}


def spark_conf(pairs: dict[str, str]) -> SparkConf:
    return SparkConf(loadDefaults=False).setAll(list(pairs.items()))


def test_an_unprotected_cluster_gets_a_warning_naming_every_setting_to_turn_on():
    message = session.spark_security_warning(spark_conf({"spark.app.name": "x"}), "spark://head:7077")
    assert message is not None and "\n" not in message
    assert "'spark://head:7077'" in message
    for key in PROTECTED:
        assert f"{key} is off" in message and f"{key}=true" in message
    assert "hopsml's connections between ranks and to the driver are authenticated" in message
    assert "task results" in message and "broadcast" in message and "run's secret" in message


def test_only_the_settings_still_off_are_named():
    conf = spark_conf({"spark.authenticate": "true", "spark.network.crypto.enabled": "TRUE"})
    message = session.spark_security_warning(conf, "yarn")
    assert message is not None
    assert "spark.io.encryption.enabled=true" in message
    assert "spark.authenticate is off" not in message and "spark.network.crypto.enabled is off" not in message


@pytest.mark.parametrize("master", ["local", "local[4]", "local-cluster[2,1,1024]"])
def test_a_local_master_gets_no_warning(master):
    assert session.spark_security_warning(spark_conf({}), master) is None


def test_a_protected_cluster_gets_no_warning():
    assert session.spark_security_warning(spark_conf(PROTECTED), "k8s://https://api:6443") is None
    with_tls = {**PROTECTED, "spark.network.crypto.enabled": "false", "spark.ssl.rpc.enabled": "true"}
    assert session.spark_security_warning(with_tls, "spark://head:7077") is None  # a plain mapping works too


def test_the_warning_is_logged_once_per_application(caplog):
    caplog.set_level(logging.WARNING, logger=session.log.name)
    conf = spark_conf({"spark.authenticate": "false"})
    first = SimpleNamespace(_conf=conf, master="spark://head:7077", applicationId="app-test-1")
    second = SimpleNamespace(_conf=conf, master="spark://head:7077", applicationId="app-test-2")
    for sc in (first, first, second):
        session.check_spark_security(sc)
    lines = [r.getMessage() for r in caplog.records if r.name == session.log.name]
    assert len(lines) == 2 and all("spark.authenticate is off" in line for line in lines)


def test_a_job_on_a_local_session_is_not_warned(caplog):
    caplog.set_level(logging.WARNING, logger=session.log.name)
    local = SimpleNamespace(_conf=spark_conf({}), master="local[2]", applicationId="local-1")
    session.check_spark_security(local)
    assert not [r for r in caplog.records if r.name == session.log.name]
