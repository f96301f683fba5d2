"""The local SparkSession the browser tests make their runs with: the same local session as
tests/spark (get_or_create returns the one already running when both folders run together)."""

import pytest

from hopsml import config, session


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    settings = config.load(environ={}, master="local[4]", log_dir=str(tmp_path_factory.mktemp("spark-logs")))
    spark = session.get_or_create(settings, app_name="hopsml-tests")
    yield spark
    spark.stop()
