"""One local SparkSession for the whole test session (starting Spark costs seconds)."""

import pytest

from hopsml import config, session


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    settings = config.load(environ={}, master="local[4]",
                           log_dir=str(tmp_path_factory.mktemp("spark-logs")))
    spark = session.get_or_create(settings, app_name="hopsml-tests")
    yield spark
    spark.stop()
