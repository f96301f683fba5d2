"""Staging folders of data jobs killed with their driver are removed by the next job on the same
dataset root and by 'hopsml datasets clean'; a job that is alive keeps its folder."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from s3 import s3_root, s3_server

from hopsml import cli, config
from hopsml.data import dataset as ds
from hopsml.fs import Storage

DATASETS = "Projects/p/Datasets"

KILLED_JOB = textwrap.dedent("""
    import os, signal, sys
    from hopsml.data import dataset as ds
    from hopsml.fs import Storage

    storage = Storage(sys.argv[1])
    with ds.staged(storage, "p", "digits", False) as stage:
        storage.write_bytes(stage.file("part-0.parquet"), b"x" * 1000)
        os.kill(os.getpid(), signal.SIGKILL)   # the driver dies: no except, no finally
""")


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["local", "s3"])
def storage(request, tmp_path):
    if request.param == "local":
        return Storage(str(tmp_path / "root"))
    return Storage(s3_root(request.getfixturevalue("s3_endpoint")))


def _staging_names(storage):
    return sorted(p.rsplit("/", 1)[-1] for p in storage.ls(DATASETS) if ds.STAGING in p)


def _killed_job(storage):
    job = subprocess.run([sys.executable, "-c", KILLED_JOB, storage.root], capture_output=True, timeout=300,
                         env={**os.environ, "HOPSML_HEARTBEAT_S": "0.2"})
    assert job.returncode == -signal.SIGKILL, job.stderr.decode()[-2000:]
    left = _staging_names(storage)
    assert len(left) == 2 and left[1] == left[0] + ds.HEARTBEAT  # the folder and its heartbeat, left behind
    return left[0]


def _settings(storage, lost_after_s):
    return config.load(environ={"HOPSML_LOST_AFTER_S": str(lost_after_s)}, root=storage.root, project="p")


def test_datasets_clean_removes_what_a_killed_job_left(storage):
    folder = _killed_job(storage)
    assert "no staging folders idle" in cli_clean(storage, lost_after_s=3600)  # not idle long enough yet
    time.sleep(1.0)
    out = cli_clean(storage, lost_after_s=0.5, dry_run=True)
    assert out.startswith("would remove stale staging folder") and folder in out and "1 files, 0.0 MB" in out
    assert _staging_names(storage) == [folder, folder + ds.HEARTBEAT]
    out = cli_clean(storage, lost_after_s=0.5)
    assert out.startswith("removed stale staging folder") and folder in out
    assert _staging_names(storage) == []


def cli_clean(storage, lost_after_s, dry_run=False):
    from hopsml.data import commands

    return commands.datasets_clean(_settings(storage, lost_after_s), dry_run=dry_run)


def test_the_next_job_removes_stale_staging_and_keeps_a_live_one(storage):
    folder = _killed_job(storage)
    time.sleep(1.0)
    with ds.staged(storage, "p", "other", False, heartbeat_s=0.2, lost_after_s=0.5) as live:
        storage.write_bytes(live.file("a.bin"), b"1")
        assert folder not in _staging_names(storage)            # the killed job's went
        # its file is older than lost_after_s, its beat (every 0.2 s) is not: the beat keeps it. The margin
        # is wide because a busy machine (and an S3 server in this process) can delay a beat by a second
        time.sleep(3.5)
        assert ds.stale_staging(storage, "p", 3.0) == []
        with ds.staged(storage, "p", "third", False, heartbeat_s=0.2, lost_after_s=3.0):
            assert storage.exists(live.file("a.bin"))
    assert _staging_names(storage) == []
    assert ds.list_names(storage, "p") == ["other", "third"]


def test_a_staging_folder_of_an_older_hopsml_is_judged_by_its_files(tmp_path):
    storage = Storage(str(tmp_path / "root"))
    old = tmp_path / "root" / DATASETS / ".flowers.staging-0123456789ab"
    old.mkdir(parents=True)
    (old / "part-0.tfrecord").write_bytes(b"y" * 10)
    then = time.time() - 7200
    os.utime(old / "part-0.tfrecord", (then, then))
    (stale,) = ds.stale_staging(storage, "p", 3600)
    assert stale.files == 1 and stale.bytes == 10 and 7100 < stale.idle_s < 7300
    assert ds.stale_staging(storage, "p", 10_000) == []


def test_the_cli_has_datasets_clean(tmp_path, capsys):
    assert cli.main(["--root", str(tmp_path), "--project", "p", "datasets", "clean", "--dry-run"]) == 0
    assert "no staging folders idle for more than 120s" in capsys.readouterr().out
