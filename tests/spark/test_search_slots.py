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


def _last_job_id(spark) -> int:
    """The id of a job run now: jobs of this test have larger ids (run ids, and so job groups, repeat across
    the tests' roots in one Spark application)."""
    sc = spark.sparkContext
    sc.setJobGroup("test-search-slots-marker", "the last job before the test")
    try:
        sc.parallelize([0], 1).count()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return max(sc.statusTracker().getJobIdsForGroup("test-search-slots-marker"))


def test_slot_tasks_run_trial_after_trial_in_one_job_and_a_failing_trial_fails_alone(spark, root):
    before = _last_job_id(spark)
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
    assert len([j for j in tracker.getJobIdsForGroup(f"{record['id']}-slots") if j > before]) == 1
    assert [j for j in tracker.getJobIdsForGroup(record["id"]) if j > before] == []
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
    return {"metric": float(len(shape)) + epochs, "kind": type(shape).__name__,
            "inner": type(shape[0]).__name__ if isinstance(shape, list) else None}


def test_tuples_travel_to_slot_tasks_and_what_json_cannot_carry_runs_as_a_job_of_its_own(spark, root):
    shapes = [(1, 2), [(3,), 4]]   # a tuple, and a list holding a tuple
    logdir, _, _ = experiment.asha(shaped, {"shape": shapes}, min_budget=1, max_budget=1, num_trials=4, seed=2,
                                   sampler="random", name="tuples")
    trials = _json(logdir, ".summary.json")["trials"]
    assert {(t["outputs"]["kind"], t["outputs"]["inner"]) for t in trials} <= {("tuple", None), ("list", "tuple")}
    assert all(t["state"] == "FINISHED" for t in trials) and len({t["outputs"]["kind"] for t in trials}) == 2
    assert all(t["placements"][0]["host"] == socket.gethostname() for t in trials)   # in the slot tasks

    def keyed(classes, epochs):
        return {"metric": float(sum(classes)), "keys": type(next(iter(classes))).__name__}

    logdir, _, _ = experiment.asha(keyed, {"classes": [{0: "cat", 1: "dog"}]}, min_budget=1, max_budget=1,
                                   num_trials=1, name="int-keys")
    (trial,) = _json(logdir, ".summary.json")["trials"]
    assert trial["state"] == "FINISHED" and trial["outputs"]["keys"] == "int"   # JSON would make them "0", "1"
    assert trial["placements"][0]["host"] is None   # not in a slot task: a Spark job of its own


def sleepy(x, epochs):
    import time

    time.sleep(60)
    return {"metric": x}


def test_ctrl_c_stops_an_asynchronous_search_and_its_slot_tasks(spark, root):
    import _thread
    import threading

    before = _last_job_id(spark)
    threading.Timer(5.0, _thread.interrupt_main).start()  # what Ctrl-C in a notebook does
    try:
        experiment.asha(sleepy, {"x": [0.0, 1.0]}, min_budget=1, max_budget=3, num_trials=4, name="interrupted")
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the search was not interrupted")
    (run,) = [p for p in (root / "Projects" / "test" / "Experiments").iterdir() if p.is_dir()]
    record = _json(str(run), "experiment.json")
    assert record["state"] == "KILLED"
    assert all(t["state"] != "FINISHED" for t in _json(str(run), ".summary.json")["trials"])
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(f"{record['id']}-slots") if j > before]
    assert jobs and all(j is None or j.status != "RUNNING" for j in jobs)   # its slot tasks were stopped
    # the session is usable: the next search gets the slots
    logdir, _, _ = experiment.asha(shaped, {"shape": [[1, 2], [3, 4]]}, min_budget=1, max_budget=1, num_trials=2,
                                   seed=2, name="after")
    assert [t["state"] for t in _json(logdir, ".summary.json")["trials"]] == ["FINISHED", "FINISHED"]


def spanned(x, epochs):
    from hopsml import timeline

    with timeline.span("train step"):
        sum(range(1000))
    return {"metric": x}


def test_every_trial_records_its_timeline_a_part_per_job_unless_told_not_to(spark, root):
    logdir, _, _ = experiment.asha(spanned, {"x": [0.0, 1.0]}, min_budget=1, max_budget=3, num_trials=3, seed=1,
                                   name="timed")
    assert _json(logdir, "experiment.json")["timeline"] == {"enabled": True, "per": "trial"}
    trials = _json(logdir, ".summary.json")["trials"]
    assert sorted(len(t["rungs"]) for t in trials) == [1, 1, 2]   # the best was promoted once
    for t in trials:
        trace = _json(str(root), t["timeline"])
        steps = [e for e in trace["traceEvents"] if e.get("name") == "train step"]
        assert len(steps) == len(t["rungs"]) and all(e["ph"] == "X" for e in steps)   # one per job it ran
        assert any(e["ph"] == "C" and e["name"] == "system" and "cpu_pct" in e["args"]   # its system samples
                   for e in trace["traceEvents"])
        assert t["timeline"].startswith(t["dir"] + "/timeline/")
    logdir, _, _ = experiment.grid_search(spanned, {"x": [1.0], "epochs": [1]}, timeline=False, name="untimed")
    (trial,) = _json(logdir, ".summary.json")["trials"]
    assert "timeline" not in trial and not os.path.exists(os.path.join(logdir, os.path.basename(trial["dir"]),
                                                                       "timeline"))
    assert _json(logdir, "experiment.json")["timeline"] == {"enabled": False, "per": "trial"}
