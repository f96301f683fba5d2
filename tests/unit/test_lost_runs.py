"""A RUNNING record whose driver stopped beating shows as LOST; mark-lost records it, clean removes it."""

import json
import os
import time

import pytest

from hopsml import cli, config
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.tracking import record as records
from hopsml.tracking.heartbeat import last_beat


def _settings(root):
    return config.load(environ={}, root=str(root), project="p")


def _started(root, name="run", heartbeat_s=0.2):
    return records.ExperimentRun.start(Storage(str(root)), "p", "app-1", name=name, heartbeat_s=heartbeat_s)


def _age_heartbeat(root, exp_id, seconds):
    """What a driver killed `seconds` ago leaves behind: its last beat, that old."""
    path = os.path.join(root, ExperimentDir.from_id("p", exp_id).path, records.HEARTBEAT)
    then = time.time() - seconds
    with open(path, "w") as f:
        json.dump({"time": then, "host": "h", "pid": 1}, f)
    os.utime(path, (then, then))


def test_a_running_experiment_beats_and_a_finished_one_stops(tmp_path):
    run = _started(tmp_path)
    storage = Storage(str(tmp_path))
    beat_path = records.heartbeat_path(run.dir)
    first = last_beat(storage, beat_path)
    assert first is not None and run.record.heartbeat_s == 0.2
    deadline = time.monotonic() + 30
    while last_beat(storage, beat_path) == first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert last_beat(storage, beat_path) > first  # rewritten while it runs
    assert records.shown_state(storage, "p", run.record, lost_after_s=1.0) == ("RUNNING", None)
    run.finish()
    assert not storage.exists(beat_path)
    assert records.read_record(storage, "p", run.id).state == "FINISHED"


def test_stopped_heartbeat_shows_lost_in_list_and_show(tmp_path):
    alive, dead = _started(tmp_path, "alive"), _started(tmp_path, "dead")
    dead._heartbeat.stop()   # as if its driver were SIGKILLed 10 minutes ago
    _age_heartbeat(tmp_path, dead.id, 600)
    settings = _settings(tmp_path)
    listing = cli.experiments_list(settings)
    table = {line.split()[0]: line for line in listing.splitlines() if line.startswith("app-1_")}
    assert " LOST " in table[dead.id] and " RUNNING " in table[alive.id]
    assert f"{dead.id}: its driver stopped: last heartbeat 10 min ago" in listing
    assert "hopsml experiments mark-lost ID" in listing
    assert dead.id in cli.experiments_list(settings, state="lost")
    assert dead.id not in cli.experiments_list(settings, state="running")
    assert "state: LOST, its driver stopped" in cli.experiments_show(settings, dead.id)
    alive.finish()


def test_mark_lost_writes_the_state_and_refuses_a_live_run(tmp_path):
    alive, dead = _started(tmp_path, "alive"), _started(tmp_path, "dead")
    dead._heartbeat.stop()
    _age_heartbeat(tmp_path, dead.id, 300)
    settings = _settings(tmp_path)
    with pytest.raises(HopsmlError, match="looks alive"):
        cli.experiments_mark_lost(settings, [alive.id])
    assert f"{dead.id}: marked LOST; its driver stopped" in cli.experiments_mark_lost(settings, [], every=True)
    rec = records.read_record(Storage(str(tmp_path)), "p", dead.id)
    assert rec.state == "LOST" and "last heartbeat 5 min ago" in rec.error and rec.finished
    assert 290 < time.time() - records.datetime.fromisoformat(rec.finished).timestamp() < 400
    with pytest.raises(HopsmlError, match="is LOST, not RUNNING"):
        cli.experiments_mark_lost(settings, [dead.id])
    assert "app-1_" in cli.experiments_list(settings, state="LOST")
    assert cli.main(["--root", str(tmp_path), "--project", "p", "experiments", "mark-lost", "--force",
                     alive.id]) == 0
    assert records.read_record(Storage(str(tmp_path)), "p", alive.id).state == "LOST"
    alive._heartbeat.stop()


def test_clean_removes_only_lost_runs(tmp_path):
    alive, dead = _started(tmp_path, "alive"), _started(tmp_path, "dead")
    dead._heartbeat.stop()
    _age_heartbeat(tmp_path, dead.id, 300)
    settings = _settings(tmp_path)
    with pytest.raises(HopsmlError, match="is RUNNING, not LOST"):
        cli.experiments_clean(settings, [alive.id])
    assert cli.experiments_clean(settings, [], lost=True, dry_run=True) == f"{dead.id}: LOST, would be removed"
    assert os.path.isdir(os.path.join(tmp_path, dead.dir.path))
    assert cli.experiments_clean(settings, [], lost=True) == f"removed {dead.id}"
    assert not os.path.exists(os.path.join(tmp_path, dead.dir.path))
    assert os.path.isdir(os.path.join(tmp_path, alive.dir.path))
    assert cli.experiments_clean(settings, [], lost=True) == "no LOST experiments"
    alive.finish()


def test_a_record_without_any_heartbeat_is_lost_once_old(tmp_path):
    run = _started(tmp_path)
    run._heartbeat.stop(remove=True)
    storage = Storage(str(tmp_path))
    assert records.lost_reason(storage, "p", run.record, 60) is None  # just started
    later = time.time() + 3600
    assert "without a heartbeat" in records.lost_reason(storage, "p", run.record, 60, now=later)


def test_a_run_dropped_without_finishing_stops_beating(tmp_path):
    run = _started(tmp_path)
    heartbeat = run._heartbeat
    del run
    import gc

    gc.collect()
    heartbeat._thread.join(30)
    assert not heartbeat._thread.is_alive()
