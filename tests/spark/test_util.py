"""hopsml.util: the hops calls that read the cluster's size, from a running session or from the settings."""

import pytest

from hopsml import util
from hopsml.cluster import session
from hopsml.errors import ClusterError, SettingsError


def test_num_executors_of_the_running_local_session(spark):
    # the shared session runs local[4]: four task slots, so four workers fit one barrier stage
    assert util.num_executors() == 4
    assert util.num_executors(spark) == 4 and util.num_executors(spark.sparkContext) == 4
    assert util.num_param_servers() == 0 and util.num_param_servers(spark) == 0


@pytest.fixture
def no_session(monkeypatch, root):
    """As in a fresh notebook kernel: no Spark running yet, so the settings answer (Spark is not started)."""
    monkeypatch.setattr(session, "active", lambda: None)
    monkeypatch.delenv("HOPSML_SPARK_CONF", raising=False)
    return monkeypatch


@pytest.mark.parametrize("master, spark_conf, expected", [
    ("local[3]", "", 3),
    ("local", "", 1),
    ("local-cluster[2,1,1024]", "", 2),
    ("spark://host:7077", "spark.executor.instances=5", 5),
    ("yarn", "spark.dynamicAllocation.enabled=true,spark.dynamicAllocation.maxExecutors=7,"
             "spark.executor.instances=2", 7),
    ("yarn", "spark.dynamicAllocation.enabled=false,spark.dynamicAllocation.maxExecutors=7,"
             "spark.executor.instances=2", 2),
])
def test_num_executors_from_the_settings(no_session, master, spark_conf, expected):
    no_session.setenv("HOPSML_MASTER", master)
    no_session.setenv("HOPSML_SPARK_CONF", spark_conf)
    assert util.num_executors() == expected


def test_num_executors_that_cannot_be_known_is_a_clear_error(no_session):
    no_session.setenv("HOPSML_MASTER", "spark://host:7077")
    with pytest.raises(ClusterError, match="spark.executor.instances"):
        util.num_executors()
    no_session.setenv("HOPSML_SPARK_CONF", "spark.executor.instances=many")
    with pytest.raises(SettingsError, match="whole number"):
        util.num_executors()


def test_param_servers_job_name_and_grid_params(no_session):
    no_session.setenv("HOPSML_SPARK_CONF", "spark.tensorflow.num.ps=2")
    assert util.num_param_servers() == 2
    no_session.delenv("HOPSWORKS_JOB_NAME", raising=False)
    assert util.get_job_name() is None
    no_session.setenv("HOPSWORKS_JOB_NAME", "nightly-train")
    assert util.get_job_name() == "nightly-train"
    grid = util.grid_params({"learning_rate": [0.001, 0.0005, 0.0001], "dropout": [0.45, 0.7]})
    assert grid == {"learning_rate": [0.001, 0.001, 0.0005, 0.0005, 0.0001, 0.0001],
                    "dropout": [0.45, 0.7, 0.45, 0.7, 0.45, 0.7]}
