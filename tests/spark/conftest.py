"""The local S3 server of the Spark tests (their SparkSession is tests/conftest.py's)."""

import pytest
from s3 import s3_server


@pytest.fixture(scope="session")
def s3_endpoint():
    """A local S3 server for the whole session."""
    with s3_server() as endpoint:
        yield endpoint
