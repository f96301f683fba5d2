import json
import multiprocessing as mp
import os
import subprocess

import pytest

from hopsml import layout, tensorboard
from hopsml.errors import ExperimentFailed, NotInRunError, ResourceNotFoundError
from hopsml.fs import Storage
from hopsml.tracking import versioning
from hopsml.tracking.metrics import read_metrics
from hopsml.tracking.record import ExperimentRun, claim_run_dir, list_records, public_spark_conf
from hopsml.tracking.run_context import active_run


def _start(storage, **kw):
    return ExperimentRun.start(storage, "p", "local-1", name="t", **kw)


def test_run_context_manager_states(tmp_path):
    storage = Storage(str(tmp_path))
    with _start(storage) as run:
        assert storage.read_json(run.dir.record)["state"] == "RUNNING"
    assert storage.read_json(run.dir.record)["state"] == "FINISHED"

    with pytest.raises(ValueError):
        with _start(storage) as failed:
            raise ValueError("bad lr")
    rec = storage.read_json(failed.dir.record)
    assert rec["state"] == "FAILED" and "bad lr" in rec["error"] and "ValueError" in rec["traceback"]

    with pytest.raises(KeyboardInterrupt):
        with _start(storage) as killed:
            raise KeyboardInterrupt
    assert storage.read_json(killed.dir.record)["state"] == "KILLED"

    with pytest.raises(ExperimentFailed):
        with _start(storage) as fn_failed:
            raise ExperimentFailed("x failed", traceback="TB", output_tail="tail")
    rec = storage.read_json(fn_failed.dir.record)
    assert (rec["traceback"], rec["output_tail"]) == ("TB", "tail")

    states = [r.state for r in list_records(storage, "p")]
    assert sorted(states) == ["FAILED", "FAILED", "FINISHED", "KILLED"]


def test_versioning_files_and_missing_resource(tmp_path):
    storage = Storage(str(tmp_path / "root"))
    res = tmp_path / "notes.txt"
    res.write_text("n")
    run = _start(storage, versioned_resources=[str(res)], fn=test_versioning_files_and_missing_resource)
    assert storage.read_text(run.dir.resource("notes.txt")) == "n"
    assert "dependencies:" in storage.read_text(run.dir.environment)
    # under pytest there is no __main__ script, so the file defining the function is versioned
    assert storage.read_text(run.dir.program(".py")) == open(__file__).read()
    with pytest.raises(ResourceNotFoundError, match="missing.txt"):
        _start(storage, versioned_resources=[str(tmp_path / "missing.txt")])


def test_pip_environment_is_conda_format():
    text = versioning._pip_environment()
    lines = text.splitlines()
    assert lines[0].startswith("name: ") and "  - pip:" in lines
    assert any(line.strip().startswith("- numpy==") for line in lines)


def test_conda_export_runs_again_only_when_a_package_changed(tmp_path, monkeypatch):
    """`conda env export` took seconds of every launch: its output is kept until conda-meta/ changes."""
    prefix, calls = tmp_path / "env", tmp_path / "calls"
    (prefix / "conda-meta").mkdir(parents=True)
    conda = tmp_path / "conda"
    conda.write_text(f"#!/bin/sh\necho run >> {calls}\necho 'name: env'\necho \"calls: $(wc -l < {calls})\"\n")
    conda.chmod(0o755)
    monkeypatch.setenv("CONDA_EXE", str(conda))
    monkeypatch.setenv("CONDA_PREFIX", str(prefix))
    first = versioning.environment_yaml()
    assert versioning.environment_yaml() == first and first.splitlines()[0] == "name: env"
    assert calls.read_text().count("run") == 1
    (prefix / "conda-meta" / "numpy-2.4.0-py311.json").write_text("{}")   # conda installed a package
    assert versioning.environment_yaml() != first
    assert calls.read_text().count("run") == 2


def test_git_info(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-qm", "x"], check=True, env=env)
    info = versioning.git_info(str(script))
    assert len(info["revision"]) == 40 and info["dirty"] is False
    script.write_text("print(2)\n")
    assert versioning.git_info(str(script))["dirty"] is True
    assert versioning.git_info("/") is None


def test_secrets_left_out_of_spark_conf():
    conf = public_spark_conf([("spark.authenticate.secret", "s3cr3t"), ("spark.master", "local")])
    assert conf == {"spark.master": "local"}


def test_metrics_jsonl_and_tensorboard_events(tmp_path):
    storage = Storage(str(tmp_path))
    run_dir = layout.RunDir("run")
    with active_run(storage, run_dir):
        for step in range(3):
            tensorboard.log({"loss": 1.0 / (step + 1)}, step=step)
        tensorboard.log({"acc": 0.5})  # default step: one past the last
        with pytest.raises(TypeError, match="must be a number"):
            tensorboard.log({"loss": "high"})
        logdir = tensorboard.logdir()
    rows = read_metrics(storage.read_text(run_dir.metrics))
    assert [(r["step"], r["name"]) for r in rows] == [(0, "loss"), (1, "loss"), (2, "loss"), (3, "acc")]
    events = [name for name in os.listdir(logdir) if name.startswith("events.out.tfevents")]
    assert len(events) == 1
    with pytest.raises(NotInRunError):
        tensorboard.logdir()
    # TensorBoard's own loader (as its UI reads, scalars migrated into its 'scalars' plugin) sees
    # the file version, then every scalar at its step
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    read = list(EventFileLoader(os.path.join(logdir, events[0])).Load())
    assert read[0].file_version == "brain.Event:2"
    assert {v.metadata.plugin_data.plugin_name for e in read[1:] for v in e.summary.value} == {"scalars"}
    scalars = [(e.step, v.tag, round(float(make_ndarray(v.tensor)), 6)) for e in read[1:] for v in e.summary.value]
    assert scalars == [(0, "loss", 1.0), (1, "loss", 0.5), (2, "loss", 0.333333), (3, "acc", 0.5)]
    assert [round(e.wall_time) for e in read[1:]] == [round(r["timestamp"]) for r in rows]


def test_metrics_of_a_remote_root_are_uploaded_at_the_end(tmp_path):
    class FakeRemote(Storage):  # a local folder that pretends to be remote, to exercise staging
        def local_path(self, rel=""):
            return None

    storage = FakeRemote(str(tmp_path))
    with active_run(storage, layout.RunDir("r")) as ctx:
        tensorboard.log({"x": 1}, step=0)
        assert not ctx.local_dir.startswith(str(tmp_path))
    assert json.loads(storage.read_text("r/metrics.jsonl"))["name"] == "x"
    assert not os.path.exists(ctx.local_dir)


def _claim(root, out):
    storage = Storage(root)
    out.extend([claim_run_dir(storage, "p", "local-42").id for _ in range(10)])


def test_run_ids_never_collide_across_processes(tmp_path):
    with mp.Manager() as manager:
        out = manager.list()
        procs = [mp.Process(target=_claim, args=(str(tmp_path), out)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        ids = list(out)
    assert len(ids) == 30 and len(set(ids)) == 30
