"""On an S3 root a run's files reach the run directory while it runs, and its local staging folder
never outlives it: also not when the task's process is killed."""

import os
import time

import pytest

from hopsml import experiment, tensorboard
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.tracking import run_context
from hopsml.tracking.metrics import read_metrics
from hopsml.tracking.record import list_records


def _copied(ctx):
    """Whether the run directory on S3 holds the lines, the metrics and the events written so far."""
    storage, run = ctx.storage, ctx.run_dir
    return (storage.exists(run.output_log) and "line 2" in storage.read_text(run.output_log)
            and storage.exists(run.metrics) and len(read_metrics(storage.read_text(run.metrics))) == 3
            and any("events.out.tfevents." in p for p in storage.ls(run.tensorboard)))


def killed_mid_way():
    """Writes lines and metrics, waits until the periodic copy has them, then dies without cleanup."""
    ctx = run_context.current()
    print(f"staging folder {ctx.local_dir}")
    for step in range(3):
        print(f"line {step}")
        tensorboard.log({"loss": 1.0 / (step + 1)}, step=step)
    deadline = time.monotonic() + 120
    while not _copied(ctx) and time.monotonic() < deadline:   # every sync_interval_s (5 s by default)
        time.sleep(0.2)
    print("copied while running" if _copied(ctx) else "NOT copied while running")
    print("last words")
    os._exit(3)  # no finally, no upload at the end


def _wait_for(condition, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_a_killed_task_keeps_its_output_and_leaves_no_staging_folder(spark, s3_endpoint, monkeypatch):
    from s3 import s3_root

    root = s3_root(s3_endpoint)
    monkeypatch.setenv("HOPSML_ROOT", root)
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    with pytest.raises(Exception):  # noqa: B017 - how the driver reports the dead task is not the point here
        experiment.launch(killed_mid_way, name="killed")
    storage = Storage(root)
    (rec,) = list_records(storage, "test")
    run = ExperimentDir.from_id("test", rec.id)
    log_text = storage.read_text(run.output_log)
    staging = log_text.split("staging folder ", 1)[1].split("\n", 1)[0]
    assert os.path.basename(staging).startswith("hopsml-run-")
    # the watcher of the dead process copies what changed since the last copy and removes the folder
    assert _wait_for(lambda: not os.path.exists(staging)), f"{staging} was left behind"
    log_text = storage.read_text(run.output_log)
    assert "copied while running" in log_text and "last words" in log_text
    assert all(f"line {step}" in log_text for step in range(3))
    rows = read_metrics(storage.read_text(run.metrics))
    assert [(r["step"], r["value"]) for r in rows] == [(0, 1.0), (1, 0.5), (2, 1.0 / 3)]
    assert any(p.startswith(run.tensorboard + "/events.out.tfevents.") for p in storage.ls(run.path, recursive=True))


def writes_a_checkpoint():
    ctx = run_context.current()
    with open(os.path.join(ctx.local_dir, "checkpoint.bin"), "wb") as f:
        f.write(b"step 7")
    run_context.current().sync()
    assert ctx.storage.read_bytes(ctx.run_dir.file("checkpoint.bin")) == b"step 7"  # there at once
    return {"staging": ctx.local_dir}


def test_sync_copies_at_once_and_a_finished_run_leaves_no_staging(spark, s3_endpoint, monkeypatch):
    from s3 import s3_root

    root = s3_root(s3_endpoint)
    monkeypatch.setenv("HOPSML_ROOT", root)
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    _, result = experiment.launch(writes_a_checkpoint, name="checkpoint")
    assert not os.path.exists(result["staging"])
