"""A task follows its run's settings snapshot, made on the driver: on an S3 root its staging folder's sync
interval and staleness bound come from the snapshot, not from the executor's own environment."""

import pytest
from s3 import s3_root, s3_server

from hopsml import config
from hopsml.fs import Storage
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.function import run_function
from hopsml.tracking import run_context


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server() as endpoint:
        yield endpoint


def test_a_task_on_a_remote_root_stages_with_its_snapshot_not_its_environment(s3_endpoint, monkeypatch):
    storage = Storage(s3_root(s3_endpoint))
    snapshot = config.RunSettings.of(config.load(environ={}, root=storage.root, sync_interval_s=2.5,
                                                 lost_after_s=1234.0))
    monkeypatch.setenv("HOPSML_LOST_AFTER_S", "not-a-number")   # the executor's own, which it must not read
    monkeypatch.setenv("HOPSML_SYNC_INTERVAL_S", "99")
    staged = []

    class Staging(run_context.StagedRun):
        def __init__(self, storage, run_path, interval_s, *, stale_after_s):
            staged.append((interval_s, stale_after_s))
            super().__init__(storage, run_path, interval_s, stale_after_s=stale_after_s)

    monkeypatch.setattr(run_context, "StagedRun", Staging)
    report = run_function(lambda: {"metric": 1.0}, {}, TaskSpec(storage, "Projects/p/Experiments/app_1", None, b"",
                                                               settings=snapshot))
    assert report["ok"], report
    assert staged == [(2.5, 1234.0)]
    assert storage.exists("Projects/p/Experiments/app_1/output.log")   # the staged files reached the root
