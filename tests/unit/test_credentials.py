"""Credentials in the root URI reach the store but never what hopsml shows or records."""

import json

import pytest
from s3 import s3_root, s3_server

from hopsml.fs import Storage
from hopsml.tracking.record import ExperimentRun, read_record

KEY, SECRET = "testing", "testing"   # what the local S3 server accepts (pyarrow takes them as user:password@)


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server() as endpoint:
        yield endpoint


def test_experiment_json_on_s3_has_no_credentials(s3_endpoint):
    root = s3_root(s3_endpoint).replace("s3://", f"s3://{KEY}:{SECRET}@")
    storage = Storage(root)
    run = ExperimentRun.start(storage, "p", "local-9", name="creds")
    text = storage.read_text(run.dir.record)
    assert f"{KEY}:{SECRET}@" not in text and "endpoint_override" not in text
    assert json.loads(text)["logdir"] == storage.uri(run.dir.path) == run.logdir
    assert run.logdir.startswith("s3://hopsml-test/")
    assert f"{KEY}:{SECRET}@" not in repr(storage)
    assert read_record(storage, "p", run.id).name == "creds"  # the store was reached with them
