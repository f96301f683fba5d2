"""Asynchronous searches: ASHA and Hyperband promotions, model-based (TPE) proposals, trials of several ranks."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hopsml import checkpoint, experiment, tensorboard
from hopsml.search.asha import SuccessiveHalving, budgets
from hopsml.search.space import Direction, SearchSpaceError, Space


def _json(*parts):
    with open(os.path.join(*parts)) as f:
        return json.load(f)


# --- the scheduler alone ------------------------------------------------------------------------------
def test_budgets_are_the_rungs_from_max_down_by_eta():
    assert budgets(1, 27, 3) == [1, 3, 9, 27]
    assert budgets(1, 20, 3) == [2, 7, 20]
    assert budgets(0.1, 1.0, 2) == pytest.approx([0.125, 0.25, 0.5, 1.0])
    with pytest.raises(SearchSpaceError, match="eta"):
        budgets(1, 9, 1)
    with pytest.raises(SearchSpaceError, match="min_budget <= max_budget"):
        budgets(9, 1, 3)


def run_sequentially(scheduler, metric_of):
    """Every job ends before the next starts: what one slot does."""
    while (job := scheduler.next_job()) is not None:
        scheduler.job_done(job, metric_of(job))
    return [(e["event"], e["trial"], e["rung"]) for e in scheduler.events]


def test_asha_promotes_the_top_third_of_each_rung_and_otherwise_starts_a_new_trial():
    q = [0.2, 0.9, 0.5, 0.1, 0.95, 0.3, 0.4, 0.6, 0.7]
    scheduler = SuccessiveHalving(lambda i: {"q": q[i]}, [1, 3, 9], eta=3, direction=Direction.MAX, num_trials=9)
    trace = run_sequentially(scheduler, lambda job: job.params["q"])
    # worked out by hand: rung 0 keeps floor(n/3) of its n results, rung 1 likewise
    assert trace == [("start", 0, 0), ("start", 1, 0), ("start", 2, 0), ("promote", 1, 1),
                     ("start", 3, 0), ("start", 4, 0), ("promote", 4, 1), ("start", 5, 0), ("start", 6, 0),
                     ("start", 7, 0), ("start", 8, 0), ("promote", 8, 1), ("promote", 4, 2)]
    low = SuccessiveHalving(lambda i: {"q": q[i]}, [1, 3, 9], eta=3, direction=Direction.MIN, num_trials=3)
    assert run_sequentially(low, lambda job: job.params["q"])[-1] == ("promote", 0, 1)  # 0.2 is the least


def test_a_free_slot_never_waits_for_a_rung_to_fill():
    scheduler = SuccessiveHalving(lambda i: {"i": i}, [1, 3, 9], eta=3, direction=Direction.MAX, num_trials=5)
    jobs = [scheduler.next_job() for _ in range(5)]   # none has ended: every slot still gets a new trial
    assert [(j.key, j.rung) for j in jobs] == [(k, 0) for k in range(5)]
    assert scheduler.next_job() is None   # all started, nothing promotable: wait for a result
    for job in jobs[:3]:
        scheduler.job_done(job, float(job.key))
    promoted = scheduler.next_job()
    assert (promoted.key, promoted.rung, promoted.budget, promoted.promoted) == (2, 1, 3, True)
    scheduler.job_done(jobs[3], None)   # a failed job is never promoted
    assert scheduler.next_job() is None


def test_hyperband_gives_new_trials_to_its_brackets_in_turn():
    scheduler = SuccessiveHalving(lambda i: {"i": i}, [1, 3, 9], eta=3, direction=Direction.MAX, num_trials=6,
                                  brackets=3)
    assert [(j.key, j.rung, j.budget) for j in (scheduler.next_job() for _ in range(6))] == [
        (0, 0, 1), (1, 1, 3), (2, 2, 9), (3, 0, 1), (4, 1, 3), (5, 2, 9)]


def test_tpe_with_a_seed_proposes_the_same_trials_twice():
    from hopsml.search.tpe import ModelBased

    def proposals(seed):
        space = Space.from_bounds({"x": [-3.0, 3.0], "n": [1, 8], "act": ["relu", "tanh"]}, ["n"])
        tpe = ModelBased(space, direction=Direction.MIN, samples=12, seed=seed, startup_trials=3)
        return run_sequentially_tpe(tpe)

    first = proposals(5)
    assert first == proposals(5) and first != proposals(6)
    # the model learns: after the random start, proposals sit nearer the minimum at x=1
    assert sum(abs(p["x"] - 1) for p in first[-4:]) < sum(abs(p["x"] - 1) for p in first[:3]) * 4 / 3


def test_a_resumed_tpe_search_tells_the_sampler_its_trials_and_runs_the_unfinished_one_first():
    from hopsml.search.tpe import ModelBased

    space = Space.from_bounds({"x": [-3.0, 3.0]})
    tpe = ModelBased(space, direction=Direction.MIN, samples=4, seed=1, startup_trials=1)
    tpe.restore([{"params": {"x": 0.5}, "state": "FINISHED", "metric": 0.25},
                 {"params": {"x": 2.0}, "state": "FAILED", "metric": None},
                 {"params": {"x": -1.0}, "state": "RUNNING", "metric": None}])
    again = tpe.next_job()
    assert (again.key, again.params) == (2, {"x": -1.0})
    tpe.job_done(again, 4.0)
    fresh = tpe.next_job()
    assert fresh.key == 3 and tpe.next_job() is None
    assert [t.state.name for t in tpe.study.trials] == ["COMPLETE", "FAIL", "COMPLETE", "RUNNING"]


def test_model_based_search_takes_any_category_and_gives_it_back_as_given():
    from hopsml.search.tpe import ConfigModel, ModelBased

    widths = [(32,), (64, 64), (128, 32, 8)]
    space = Space.from_bounds({"layers": widths, "x": [-1.0, 1.0]})
    tpe = ModelBased(space, direction=Direction.MAX, samples=24, seed=3, startup_trials=4)
    proposed = run_sequentially_tpe(tpe, lambda p: (p["layers"] == (64, 64)) - p["x"] ** 2)
    assert all(p["layers"] in widths and isinstance(p["layers"], tuple) for p in proposed)
    assert sum(p["layers"] == (64, 64) for p in proposed[-10:]) >= 5   # at random 3.3: it learned which pays

    # a resumed search reads its parameters back from JSON, where a tuple is a list
    resumed = ModelBased(space, direction=Direction.MAX, samples=3, seed=3, startup_trials=1)
    resumed.restore([{"params": {"layers": [64, 64], "x": 0.1}, "state": "FINISHED", "metric": 0.9},
                     {"params": {"layers": [128, 32, 8], "x": 0.2}, "state": "RUNNING", "metric": None}])
    assert resumed.next_job().params == {"layers": (128, 32, 8), "x": 0.2}
    with pytest.raises(SearchSpaceError, match="not one of the categories of 'layers'"):
        ModelBased(space, direction=Direction.MAX, samples=2, seed=3).restore(
            [{"params": {"layers": [16], "x": 0.0}, "state": "FINISHED", "metric": 0.5}])

    model = ConfigModel(space, direction=Direction.MAX, seed=1, random_configs=space.sample(8, 1).__getitem__,
                        min_points=2)
    reached = [({"layers": [64, 64], "x": 0.0}, 1, 0.9), ({"layers": (32,), "x": 0.5}, 0, 0.2)]
    assert model.draw(5, reached)["layers"] in widths


def test_asha_with_tpe_configurations_draws_them_from_the_results_of_its_highest_full_rung():
    from hopsml.search.tpe import ConfigModel

    space = Space.from_bounds({"x": [-3.0, 3.0]})
    randoms = space.sample(40, 4)
    model = ConfigModel(space, direction=Direction.MAX, seed=4, random_configs=randoms.__getitem__, min_points=5)
    scheduler = SuccessiveHalving(randoms.__getitem__, [1, 3], eta=3, direction=Direction.MAX, num_trials=40,
                                  model=model)
    run_sequentially(scheduler, lambda job: -(job.params["x"] - 1) ** 2)
    drawn = scheduler.params
    assert drawn[:5] == randoms[:5] and drawn[5:] != randoms[5:40]   # random until rung 0 had 5 results
    assert model.modelled == 35 and scheduler.describe()["sampler"] == "tpe"
    # the model learns: its configurations sit nearer the best x=1 than random ones do
    assert sum(abs(p["x"] - 1) for p in drawn[-15:]) < 0.8 * sum(abs(p["x"] - 1) for p in randoms[-15:])
    plain = SuccessiveHalving(randoms.__getitem__, [1, 3], eta=3, direction=Direction.MAX, num_trials=3)
    assert plain.describe()["sampler"] == "random"


def test_asha_fits_its_next_tpe_configuration_ahead_and_takes_it_when_ready():
    from hopsml.search.tpe import ConfigModel

    space = Space.from_bounds({"x": [-3.0, 3.0]})
    points = space.sample(20, 2)
    reached = [(points[i], 0, -(points[i]["x"] - 1) ** 2) for i in range(6)]
    model = ConfigModel(space, direction=Direction.MAX, seed=2, random_configs=points.__getitem__, ahead=True)
    first = model.draw(6, reached)
    assert first == model._fit(6, reached)
    deadline = time.monotonic() + 120
    while model._ready is None:   # the fit of configuration 7 began with that draw, on those 6 results
        assert time.monotonic() < deadline, "nothing fitted ahead"
        time.sleep(0.01)
    more = reached + [(first, 1, 0.5)]
    assert model.draw(7, more) == model._fit(7, reached) != model._fit(7, more)   # taken as fitted then
    assert model.draw(9, more) == model._fit(9, more)   # not the one fitted ahead (8): fitted now
    assert model.modelled == 3


def test_gp_sampler_with_a_seed_proposes_the_same_trials_and_learns():
    from hopsml.search.tpe import ModelBased

    def proposals(seed):
        gp = ModelBased(Space.from_bounds({"x": [-3.0, 3.0], "n": [1, 8]}), direction=Direction.MIN, samples=8,
                        seed=seed, sampler="gp", startup_trials=3)
        assert gp.describe() == {"sampler": "gp", "startup_trials": 3}
        return run_sequentially_tpe(gp)

    first = proposals(5)
    assert first == proposals(5) and first != proposals(6)
    assert sum(abs(p["x"] - 1) for p in first[-3:]) < sum(abs(p["x"] - 1) for p in first[:3])


def run_sequentially_tpe(tpe, metric=lambda p: (p["x"] - 1) ** 2 + p["n"] / 100):
    params = []
    while (job := tpe.next_job()) is not None:
        params.append(job.params)
        tpe.job_done(job, metric(job.params))
    return params


# --- on Spark -----------------------------------------------------------------------------------------
def climb(q, epochs):
    """Accuracy rises with the epochs towards q; a promoted run continues from its checkpoint."""
    restored = checkpoint.load()
    first = restored[1] + 1 if restored else 0
    for epoch in range(first, epochs):
        tensorboard.log({"acc": q * (1 - 0.5 ** (epoch + 1))}, step=epoch)
    checkpoint.save({"q": q}, epochs - 1)
    return {"acc": q * (1 - 0.5 ** epochs), "epochs_trained": epochs - first}


def expected_schedule(qualities, rungs, eta):
    """ASHA on one slot, written out plainly: promote from the highest rung with a due promotion,
    else start the next configuration."""
    done = [dict() for _ in rungs]
    promoted = [set() for _ in rungs]
    events, started = [], 0
    while True:
        job = None
        for r in range(len(rungs) - 2, -1, -1):
            ranked = sorted(done[r], key=lambda k: -done[r][k])[:len(done[r]) // eta]
            todo = [k for k in ranked if k not in promoted[r]]
            if todo:
                promoted[r].add(todo[0])
                job = (todo[0], r + 1)
                break
        if job is None and started < len(qualities):
            job, started = (started, 0), started + 1
        if job is None:
            return events
        events.append(job)
        key, r = job
        done[r][key] = qualities[key] * (1 - 0.5 ** rungs[r])


def test_asha_on_spark_promotes_exactly_and_keeps_every_trial(spark, root):
    space = {"q": [0.0, 1.0]}
    logdir, best, outputs = experiment.asha(climb, space, budget="epochs", min_budget=1, max_budget=9, eta=3,
                                            num_trials=9, optimization_key="acc", seed=11, max_parallel=1,
                                            sampler="random", name="asha")
    qualities = [p["q"] for p in Space.from_bounds(space).sample(9, 11)]
    record = _json(logdir, "experiment.json")
    jobs = [(e["trial"], e["rung"]) for e in record["jobs"] if e["event"] == "start"]
    assert jobs == expected_schedule(qualities, [1, 3, 9], 3)
    assert record["strategy"] == "asha" and record["budgets"] == [1, 3, 9] \
        and record["promotions"] == sum(r > 0 for _, r in jobs)
    trials = _json(logdir, ".summary.json")["trials"]
    assert len(trials) == 9 and all(t["params"]["q"] == q for t, q in zip(trials, qualities))
    top = [t for t in trials if t["rung"] == 2]
    assert len(top) == 1 and top[0]["state"] == "FINISHED" and best == top[0]["params"]
    assert best["q"] == max(qualities[k] for k, r in jobs if r == 1)
    assert [r["budget"] for r in top[0]["rungs"]] == [1, 3, 9]
    # the promoted runs continued from the checkpoint in the same folder: one curve, epochs 0..8
    assert outputs["epochs_trained"] == 6
    curve = [json.loads(line) for line in open(os.path.join(logdir, os.path.basename(top[0]["dir"]), "metrics.jsonl"))]
    assert [row["step"] for row in curve if row["name"] == "acc"] == list(range(9))
    stopped = [t for t in trials if t["rung"] == 0]
    assert stopped and all(t["state"] == "EARLY_STOPPED" and t["note"] == "stopped at rung 0 (epochs=1)"
                           and t["metric"] is not None for t in stopped)
    for t in stopped:   # its record and curve stay
        assert os.path.exists(os.path.join(logdir, os.path.basename(t["dir"]), ".outputs.json"))
        assert any(n.endswith(".hparams")
                   for n in os.listdir(os.path.join(logdir, os.path.basename(t["dir"]), "tensorboard")))
    assert record["trials"]["EARLY_STOPPED"] == 8 and record["trials"]["FINISHED"] == 1
    # the web view's search page: the rungs with the promoted trials, and why each trial stopped
    from hopsml import config
    from hopsml.ui import create_app

    page = create_app(config.load()).test_client().get(f"/p/test/runs/{record['id']}").get_data(as_text=True)
    rungs = page[page.index('id="rungs"'):page.index("</table>", page.index('id="rungs"'))]
    assert rungs.count("<tr>") == 1 + 3 and "stopped at rung 0 (epochs=1)" in page
    assert rungs.count("q=") == sum(r > 0 for _, r in jobs)   # each promotion names its trial


def test_asha_never_leaves_a_slot_idle_while_a_trial_could_start(spark, root):
    logdir, _, _ = experiment.hyperband(climb, {"q": [0.0, 1.0]}, min_budget=1, max_budget=4, eta=2,
                                        num_trials=10, optimization_key="acc", seed=3, name="hyperband")
    record = _json(logdir, "experiment.json")
    log = record["jobs"]
    assert record["parallel_trials"] == 4 and record["brackets"] == 3 and record["sampler"] == "tpe"
    starts = 0
    for i, event in enumerate(log):
        if event["event"] == "start":
            starts += 1
        elif starts < 10:   # a new configuration was there to start: this slot took it at once
            following = log[i + 1]
            assert following["event"] == "start" and following["slot"] == event["slot"], log[i:i + 2]
    assert starts == 10 + record["promotions"] and 0 < record["slot_utilisation"] <= 1


def test_tpe_search_with_a_seed_runs_the_same_trials_twice(spark, root):
    def bowl(x, width):
        return {"loss": (x - 1) ** 2 + width / 1000}

    space = {"x": [-3.0, 3.0], "width": [8, 64]}
    one, best, _ = experiment.tpe_search(bowl, space, direction="min", samples=6, startup_trials=2, seed=7,
                                         optimization_key="loss", max_parallel=1, name="tpe")
    two, best_again, _ = experiment.tpe_search(bowl, space, direction="min", samples=6, startup_trials=2, seed=7,
                                               optimization_key="loss", max_parallel=1, name="tpe")
    params = [t["params"] for t in _json(one, ".summary.json")["trials"]]
    assert params == [t["params"] for t in _json(two, ".summary.json")["trials"]] and best == best_again
    assert len(params) == 6 and all(isinstance(p["width"], int) and -3 <= p["x"] <= 3 for p in params)
    assert _json(one, "experiment.json")["strategy"] == "tpe"


def ranked(x):
    """A trial of two ranks: the sum over ranks proves they are connected; rank 1 fails for x == 2 and its
    process dies for x == 4."""
    import os
    import time

    from hopsml import collective

    if x == 2 and collective.rank() == 1:
        raise ValueError("rank 1 cannot go on with x=2")
    if x == 4 and collective.rank() == 1:
        os._exit(3)   # the rank's process dies
    time.sleep(1.0)   # long enough that two trials overlap
    return {"metric": -abs(x - 3), "ranks": collective.allreduce(1.0), "rank": collective.rank()}


def test_distributed_trials_pack_two_ranks_each_and_a_failing_rank_fails_its_trial_alone(spark, root):
    logdir, best, outputs = experiment.grid_search(ranked, {"x": [1, 2, 3, 4]}, num_workers=2, name="ranked")
    record = _json(logdir, "experiment.json")
    assert record["parallel_trials"] == 2 and record["num_workers"] == 2
    first_end = next(i for i, e in enumerate(record["jobs"]) if e["event"] == "end")
    assert first_end >= 2   # two trials of two ranks ran at once on the 4 slots
    trials = _json(logdir, ".summary.json")["trials"]
    assert all(t["ranks"] == 2 for t in trials)
    for t in trials:
        if t["params"]["x"] == 2:
            assert t["state"] == "FAILED" and t["error"].startswith("rank 1 of 2: ValueError: rank 1 cannot go on")
        elif t["params"]["x"] == 4:
            assert t["state"] == "FAILED" and t["error"].startswith("rank 1 of 2: "), t["error"]
        else:
            assert t["state"] == "FINISHED" and t["outputs"]["ranks"] == 2.0 and t["outputs"]["rank"] == 0
            assert os.path.exists(os.path.join(logdir, os.path.basename(t["dir"]), "logs", "worker_1.log"))
    assert len(trials) == 4 and best == {"x": 3} and outputs["metric"] == 0


RESUMABLE = textwrap.dedent("""
    import os, sys, time
    from hopsml import checkpoint, experiment, tensorboard

    def climb(q, epochs):
        restored = checkpoint.load()
        first = restored[1] + 1 if restored else 0
        hold = os.environ.get("HOLD_TRIALS", "/nonexistent")
        with open(hold + ".jobs", "a") as f:   # the fifth job is held until the test has killed the driver
            f.write("1")
        with open(hold + ".jobs") as f:
            fifth = len(f.read()) == 5
        if fifth:
            open(hold + ".held", "w").close()
        while fifth and os.path.exists(hold):
            time.sleep(0.2)
        for epoch in range(first, epochs):
            tensorboard.log({"acc": q * (1 - 0.5 ** (epoch + 1))}, step=epoch)
        checkpoint.save({"q": q}, epochs - 1)
        return {"acc": q * (1 - 0.5 ** epochs), "epochs_trained": epochs - first}

    experiment.asha(climb, {"q": [0.0, 1.0]}, min_budget=1, max_budget=9, eta=3, num_trials=9,
                    optimization_key="acc", seed=11, max_parallel=1, sampler="random", name="resumable")
""")


def _summary_of(root):
    found = list(root.glob("Projects/test/Experiments/*/.summary.json"))
    try:
        return json.loads(found[0].read_text())["trials"] if found else []
    except (ValueError, KeyError):   # being replaced
        return []


def _wait_for(condition, what, limit_s=300.0):
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.2)


def test_a_search_whose_driver_was_killed_resumes_from_its_record(spark, root, tmp_path):
    hold = tmp_path / "hold"
    env = {**os.environ, "HOLD_TRIALS": str(hold), "HOPSML_MASTER": "local[2]",
           "HOPSML_LOG_DIR": str(tmp_path / "logs")}
    (tmp_path / "driver.py").write_text(RESUMABLE)
    hold.touch()
    driver = subprocess.Popen([sys.executable, str(tmp_path / "driver.py")], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(lambda: (tmp_path / "hold.held").exists() and sum(t["state"] == "RUNNING" for t in _summary_of(root))
                  == 1 and sum(len(t.get("rungs") or []) for t in _summary_of(root)) == 4,
                  "four ended jobs and a fifth held in its function")
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        before = _summary_of(root)
        (old_id,) = [p.parent.name for p in root.glob("Projects/test/Experiments/*/.summary.json")]
        logdir, best, outputs = experiment.asha(climb, {"q": [0.0, 1.0]}, min_budget=1, max_budget=9, eta=3,
                                                num_trials=9, optimization_key="acc", max_parallel=1,
                                                resume=old_id, name="resumed")
    finally:
        hold.unlink(missing_ok=True)   # a trial process the killed driver left behind ends too
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    record = _json(logdir, "experiment.json")
    running = [t["index"] for t in before if t["state"] == "RUNNING"]
    assert len(running) == 1
    ended = [(t["index"], e["rung"]) for t in before for e in t.get("rungs") or []]
    assert record["resumed_from"] == {"experiment": old_id, "trials": len(before), "restarted": len(running)}
    assert record["sampler"] == "random"   # as the killed search drew, though the default is TPE
    # the ended jobs are not run again; the running one runs first; then the search goes on as it would have
    new_jobs = [(e["trial"], e["rung"]) for e in record["jobs"] if e["event"] == "start"]
    qualities = [p["q"] for p in Space.from_bounds({"q": [0.0, 1.0]}).sample(9, 11)]
    expected = expected_schedule(qualities, [1, 3, 9], 3)
    assert new_jobs[0][0] == running[0] and sorted(ended + new_jobs) == sorted(expected)
    assert not set(ended) & set(new_jobs)
    trials = _json(logdir, ".summary.json")["trials"]
    assert len(trials) == 9 and all(t["state"] != "RUNNING" for t in trials)
    for t in trials:   # every trial's folder is in the new search, with one continuous curve
        folder = os.path.join(logdir, os.path.basename(t["dir"]))
        steps = [json.loads(line)["step"] for line in open(os.path.join(folder, "metrics.jsonl"))]
        assert steps == list(range(t["budget"])), (t["dir"], steps)
    assert best["q"] == max(qualities[k] for k, r in expected if r == 1)


def leave_out(ablated_feature, ablated_layer):
    lost = {"age": 0.1, "income": 0.0}.get(ablated_feature, 0.0) + {"dense_1": 0.3}.get(ablated_layer, 0.0)
    if ablated_layer == "broken":
        raise ValueError("the model cannot be built without layer 'broken'")
    return {"accuracy": 0.9 - lost}


def test_ablation_study_compares_each_left_out_part_with_the_base(spark, root):
    logdir, best, _ = experiment.ablation(leave_out, features=["age", "income"], layers=["dense_1", "broken"],
                                          optimization_key="accuracy", name="ablation")
    table = _json(logdir, "experiment.json")["ablation"]
    assert [(r["left_out"], r["state"], r["change"]) for r in table] == [
        ("nothing (base)", "FINISHED", 0.0), ("feature age", "FINISHED", -0.1), ("feature income", "FINISHED", 0.0),
        ("layer dense_1", "FINISHED", -0.3), ("layer broken", "FAILED", None)]
    assert best == {"ablated_feature": None, "ablated_layer": None}
    from hopsml import config
    from hopsml.ui import create_app

    record = _json(logdir, "experiment.json")
    page = create_app(config.load()).test_client().get(f"/p/test/runs/{record['id']}").get_data(as_text=True)
    assert 'id="ablation"' in page and "layer dense_1" in page
    with pytest.raises(SearchSpaceError, match="features or layers"):
        experiment.ablation(leave_out)


def spans_per_epoch(q, epochs):
    """Two ranks that sum their rank over the collective once per epoch, each epoch a span named with the budget."""
    from hopsml import collective, timeline

    for _ in range(epochs):
        with timeline.span("epoch", budget=epochs):
            collective.allreduce(float(collective.rank()))
    return {"acc": q * (1 - 0.5 ** epochs)}


def test_a_promoted_distributed_trial_keeps_the_timeline_of_every_rung_it_ran(spark, root):
    logdir, best, _ = experiment.asha(spans_per_epoch, {"q": [0.0, 1.0]}, min_budget=1, max_budget=3, eta=3,
                                      num_trials=3, optimization_key="acc", seed=3, num_workers=2, name="rungs")
    (top,) = [t for t in _json(logdir, ".summary.json")["trials"] if t["rung"] == 1]
    folder = os.path.join(logdir, os.path.basename(top["dir"]), "timeline")
    assert sorted(n for n in os.listdir(folder) if n.startswith("rank-")) == [f"rank-{i}.json" for i in range(4)]
    trace = _json(folder, "trace.json")
    epochs = [(e["pid"], e["args"]["budget"]) for e in trace["traceEvents"]
              if e.get("name") == "epoch" and e.get("ph") == "X"]
    # each rank's spans of both runs: 1 epoch at budget 1, then 3 at budget 3
    assert sorted(epochs) == sorted([(rank, 1) for rank in (0, 1)] + [(rank, 3) for rank in (0, 1)] * 3), epochs
