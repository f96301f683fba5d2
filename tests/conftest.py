"""Shared fixtures: every test gets its own project root, so tests never see each other's runs; one local
SparkSession serves every folder's tests (starting Spark costs seconds, and a second session in the same
process would run in the first one's JVM, with the environment that JVM started with)."""

import pytest
from s3 import use_test_credentials

from hopsml import config
from hopsml.cluster import session


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A fresh HOPSML_ROOT for this test."""
    path = tmp_path / "root"
    monkeypatch.setenv("HOPSML_ROOT", str(path))
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    return path


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    use_test_credentials()  # before the JVM and its Python workers start, so tasks can reach S3 too
    settings = config.load(environ={}, master="local[4]",
                           log_dir=str(tmp_path_factory.mktemp("spark-logs")))
    spark = session.get_or_create(settings, app_name="hopsml-tests")
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def mariadb_url(tmp_path_factory):
    """One MariaDB server (tests/mariadb.py) for the online store's tests of a session; each test's tables are
    named by its own project."""
    from mariadb import mariadb_server

    with mariadb_server(tmp_path_factory.mktemp("mariadb")) as url:
        yield url


def pytest_collection_modifyitems(items):
    """tests/unit's tests carry the marker `unit`: CI runs those not marked slow first, then `-m "slow or not unit"`,
    README's `python -m pytest -q` in two parts with every test run once."""
    for item in items:
        if item.nodeid.startswith("tests/unit/"):
            item.add_marker(pytest.mark.unit)
