"""One local SparkSession for the whole test session (starting Spark costs seconds)."""

import pytest
from s3 import s3_server, use_test_credentials

from hopsml import config, session


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    use_test_credentials()  # before the JVM and its Python workers start, so tasks can reach S3 too
    settings = config.load(environ={}, master="local[4]",
                           log_dir=str(tmp_path_factory.mktemp("spark-logs")))
    spark = session.get_or_create(settings, app_name="hopsml-tests")
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def s3_endpoint():
    """A local S3 server for the whole session."""
    with s3_server() as endpoint:
        yield endpoint
