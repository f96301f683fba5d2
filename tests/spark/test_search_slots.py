"""The long-lived slot tasks of the asynchronous searches: one Spark job for the whole search, one worker
process per slot reused from trial to trial, and a trial that raises or ends its process failing alone."""

import json
import os
import socket

from hopsml import experiment


def _json(*parts):
    with open(os.path.join(*parts)) as f:
        return json.load(f)


def leave_out(ablated_feature, ablated_layer):
    import os

    if ablated_layer == "raise":
        raise ValueError("the model cannot be built without layer 'raise'")
    if ablated_layer == "die":
        os._exit(3)   # the trial ends the worker process it runs in
    with open("scratch.txt", "a") as f:   # a working directory of its own: no other trial's file is here
        f.write("x")
    with open("scratch.txt") as f:
        scratch = len(f.read())
    return {"accuracy": 0.9 - 0.01 * len(ablated_feature or ""), "pid": os.getpid(), "scratch": scratch}


def test_slot_tasks_run_trial_after_trial_in_one_job_and_a_failing_trial_fails_alone(spark, root):
    features = [f"f{'x' * i}" for i in range(7)]
    logdir, best, _ = experiment.ablation(leave_out, features=features, layers=["raise", "die"],
                                          optimization_key="accuracy", name="slots")
    record = _json(logdir, "experiment.json")
    trials = {t["params"]["ablated_layer"] or t["params"]["ablated_feature"] or "base": t
              for t in _json(logdir, ".summary.json")["trials"]}
    assert trials["raise"]["state"] == "FAILED"
    assert trials["raise"]["error"] == "ValueError: the model cannot be built without layer 'raise'"
    assert "Traceback" in trials["raise"]["traceback"]
    died = trials["die"]
    assert died["state"] == "FAILED" and died["error"] == (
        "trial ablated_feature=None&ablated_layer=die: its process exited with exit code 3 before returning a result")
    finished = [t for t in trials.values() if t["state"] == "FINISHED"]
    assert len(finished) == 8 and best == {"ablated_feature": None, "ablated_layer": None}
    # 10 trials on 4 slots: each slot's worker process ran several of them, one more started after the death
    pids = {t["outputs"]["pid"] for t in finished}
    assert len(pids) <= record["parallel_trials"] + 1 < len(finished)
    assert all(t["outputs"]["scratch"] == 1 for t in finished)
    # one Spark job for the whole search, none per trial
    tracker = spark.sparkContext.statusTracker()
    assert len(tracker.getJobIdsForGroup(f"{record['id']}-slots")) == 1
    assert tracker.getJobIdsForGroup(record["id"]) == []
    # each trial knows its slot, host and times; a slot runs one trial at a time
    by_slot = {}
    for t in trials.values():
        (placed,) = t["placements"]
        assert placed["host"] == socket.gethostname() and placed["start"] <= placed["end"]
        by_slot.setdefault(placed["slot"], []).append((placed["start"], placed["end"]))
    assert set(by_slot) <= set(range(record["parallel_trials"]))
    for spans in by_slot.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    # the trials' logs are where they were
    assert "raise" in open(os.path.join(logdir, os.path.basename(trials["raise"]["dir"]), "output.log")).read()


def shaped(shape, epochs):
    return {"metric": float(sum(shape)) + epochs, "kind": type(shape).__name__}


def test_arguments_json_cannot_carry_run_as_a_job_of_their_own(spark, root):
    logdir, best, outputs = experiment.asha(shaped, {"shape": [(1, 2), (3, 4)]}, min_budget=1, max_budget=1,
                                            num_trials=2, seed=2, name="tuples")
    trials = _json(logdir, ".summary.json")["trials"]
    assert all(t["state"] == "FINISHED" and t["outputs"]["kind"] == "tuple" for t in trials)
    assert all(t["placements"][0]["host"] is None for t in trials)   # not in a slot task
