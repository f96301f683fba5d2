"""Searches on the shared local session: trials as parallel Spark tasks, one folder each."""

import json
import logging
import os
import time

import pytest

from hopsml import experiment, tensorboard
from hopsml.errors import ExperimentFailed
from hopsml.search.space import Direction, SearchSpaceError


def _json(*parts):
    with open(os.path.join(*parts)) as f:
        return json.load(f)


def peak(x, y):
    return {"score": -((x - 2) ** 2) - (y - 1) ** 2, "x_seen": x}


def test_grid_finds_the_optimum_and_writes_a_folder_per_trial(spark, root):
    grid = {"x": [0, 1, 2, 3], "y": [0, 1]}
    logdir, best, outputs = experiment.grid_search(peak, grid, direction="max", name="grid",
                                                   optimization_key="score")
    assert best == {"x": 2, "y": 1} and outputs["score"] == 0
    trial_dirs = [d for d in os.listdir(logdir) if "=" in d]
    assert len(trial_dirs) == 8 and "x=2&y=1" in trial_dirs
    trial = os.path.join(logdir, "x=2&y=1")
    assert _json(trial, ".hparams.json") == {"x": 2, "y": 1}
    assert _json(trial, ".outputs.json")["x_seen"] == 2
    assert float(open(os.path.join(trial, ".metric")).read()) == 0.0
    assert os.path.exists(os.path.join(trial, "output.log"))
    summary = _json(logdir, ".summary.json")["trials"]
    assert len(summary) == 8 and {t["state"] for t in summary} == {"FINISHED"}
    record = _json(logdir, "experiment.json")
    assert record["type"] == "PARALLEL_EXPERIMENTS" and record["state"] == "FINISHED"
    assert record["best_hyperparameters"] == best and record["metric"] == 0 and record["direction"] == "max"
    assert record["best_logdir"].endswith("x=2&y=1")
    # TensorBoard's HParams tab: the experiment in the search's tensorboard/, a session in each trial's own
    # tensorboard/ (a subfolder would be a second run of the trial)
    assert any(n.endswith(".hparams") for n in os.listdir(os.path.join(logdir, "tensorboard")))
    assert any(n.endswith(".hparams") for n in os.listdir(os.path.join(trial, "tensorboard")))
    assert not os.path.exists(os.path.join(trial, "tensorboard", "hparams"))


def test_min_direction_enum(spark, root):
    _, best, _ = experiment.grid_search(lambda x: {"loss": (x - 3) ** 2}, {"x": [1, 3, 5]},
                                        direction=Direction.MIN, optimization_key="loss")
    assert best == {"x": 3}


def test_random_search_bounds_types_and_seed(spark, root):
    bounds = {"x": [0, 4], "y": [0.0, 2.0]}
    logdir, best, _ = experiment.random_search(peak, bounds, samples=5, seed=3, optimization_key="score")
    again, best_again, _ = experiment.random_search(peak, bounds, samples=5, seed=3, optimization_key="score")
    params = [t["params"] for t in _json(logdir, ".summary.json")["trials"]]
    assert params == [t["params"] for t in _json(again, ".summary.json")["trials"]] and best == best_again
    assert all(isinstance(p["x"], int) and 0 <= p["x"] <= 4 and 0 <= p["y"] <= 2 for p in params)


def test_differential_evolution_improves_on_its_first_generation(spark, root):
    logdir, best, outputs = experiment.differential_evolution(
        peak, {"x": [-10.0, 10.0], "y": [-10.0, 10.0]}, generations=6, population=6, seed=2,
        optimization_key="score")
    record = _json(logdir, "experiment.json")
    history = record["best_per_generation"]
    assert len(history) == 6 and history == sorted(history)  # selection never loses the best
    assert history[-1] > history[0] and outputs["score"] == history[-1]
    assert len(_json(logdir, ".summary.json")["trials"]) == 36


def flaky(x):
    if x == 2:
        raise ValueError("x=2 is cursed")
    return {"metric": x}


def test_one_failing_trial_is_recorded_and_the_search_completes(spark, root):
    logdir, best, _ = experiment.grid_search(flaky, {"x": [1, 2, 3]})
    assert best == {"x": 3}
    trials = {t["params"]["x"]: t for t in _json(logdir, ".summary.json")["trials"]}
    assert trials[2]["state"] == "FAILED" and "cursed" in trials[2]["traceback"]
    assert _json(logdir, "experiment.json")["trials"] == {"FINISHED": 2, "FAILED": 1, "EARLY_STOPPED": 0}


def test_all_trials_failing_raises_with_the_first_traceback(spark, root):
    with pytest.raises(ExperimentFailed, match="all 2 trials") as info:
        experiment.grid_search(lambda x: 1 / 0, {"x": [1, 2]})
    assert "ZeroDivisionError" in str(info.value)


def test_missing_or_non_numeric_metric_fails_the_trial_clearly(spark, root):
    with pytest.raises(ExperimentFailed, match="no 'accuracy'"):
        experiment.grid_search(lambda x: {"acc": x}, {"x": [1]}, optimization_key="accuracy")
    with pytest.raises(ExperimentFailed, match="finite number"):
        experiment.grid_search(lambda x: {"metric": "high"}, {"x": [1]})


def test_bad_searches_fail_before_spark(spark, root):
    with pytest.raises(SearchSpaceError, match="empty"):
        experiment.grid_search(peak, {})
    with pytest.raises(SearchSpaceError, match="bound of 'x'"):
        experiment.random_search(peak, {"x": "3 to 1"})
    with pytest.raises(SearchSpaceError, match="direction"):
        experiment.grid_search(peak, {"x": [1]}, direction="sideways")
    assert not (root / "Projects").exists()


def curve(quality, seed):
    """Converges to `quality`; bad trials are slow, so the good ones complete while they run."""
    for step in range(12):
        tensorboard.log({"accuracy": quality * (1 - 0.5 ** (step + 1))}, step=step)
        time.sleep(0.02 if quality > 0.5 else 0.4)
    return {"accuracy": quality, "seed": seed}


def test_median_early_stopping(spark, root):
    # Three good trials with the same curve (never worse than their own median) and three bad ones.
    grid = {"quality": [0.9, 0.1], "seed": [1, 2, 3]}
    logdir, best, _ = experiment.grid_search(curve, grid, optimization_key="accuracy",
                                             early_stopping="median", early_stopping_min_steps=3)
    trials = _json(logdir, ".summary.json")["trials"]
    good = [t for t in trials if t["params"]["quality"] == 0.9]
    bad = [t for t in trials if t["params"]["quality"] == 0.1]
    assert best["quality"] == 0.9 and all(t["state"] == "FINISHED" for t in good)
    assert all(t["state"] == "EARLY_STOPPED" for t in bad)
    assert all(t["metric"] is not None and t["duration"] < 12 * 0.4 for t in bad)  # partial result kept
    assert _json(logdir, "experiment.json")["trials"]["EARLY_STOPPED"] == 3


def slow(x):
    time.sleep(30)
    return {"metric": x}


def test_ctrl_c_marks_the_search_killed_and_cancels_trials(spark, root):
    import _thread
    import threading

    threading.Timer(3.0, _thread.interrupt_main).start()  # what Ctrl-C in a notebook does
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        experiment.grid_search(slow, {"x": [1, 2]}, name="interrupted")
    assert time.monotonic() - start < 25  # cancelled, not waited for
    (run,) = [p for p in (root / "Projects" / "test" / "Experiments").iterdir() if p.is_dir()]
    assert _json(str(run), "experiment.json")["state"] == "KILLED"
    # the cancelled trials leave the shared session usable
    _, best, _ = experiment.grid_search(lambda x: x, {"x": [1, 2]})
    assert best == {"x": 2}


def dying(x):
    import signal

    os.write(1, f"native line of trial {x}\n".encode())  # bypasses sys.stdout, as C code does
    if x == 2:
        os._exit(3)
    if x == 3:
        os.kill(os.getpid(), signal.SIGSEGV)
    return {"metric": x}


def test_trials_that_die_are_failed_with_their_cause_and_the_search_goes_on(spark, root):
    logdir, best, outputs = experiment.grid_search(dying, {"x": [1, 2, 3, 0]}, name="dying")
    assert best == {"x": 1} and outputs["metric"] == 1
    trials = {t["params"]["x"]: t for t in _json(logdir, ".summary.json")["trials"]}
    assert len(trials) == 4 and trials[1]["state"] == trials[0]["state"] == "FINISHED"
    assert trials[2]["state"] == "FAILED" and "exit code 3" in trials[2]["error"]
    assert trials[3]["state"] == "FAILED" and "SIGSEGV" in trials[3]["error"]
    assert "native line of trial 3" in trials[3]["traceback"]  # its last lines, in place of a traceback
    assert _json(logdir, "experiment.json")["trials"] == {"FINISHED": 2, "FAILED": 2, "EARLY_STOPPED": 0}
    for x in (1, 2, 3):
        with open(os.path.join(logdir, trials[x]["dir"].rsplit("/", 1)[-1], "output.log")) as f:
            assert f"native line of trial {x}" in f.read()


def test_a_dead_trial_is_named_by_its_parameters_and_the_warning_gives_a_path_to_open(spark, root, caplog):
    with caplog.at_level(logging.WARNING, logger="hopsml"):
        logdir, best, _ = experiment.grid_search(dying, {"x": [1, 2]}, name="named")
    assert best == {"x": 1}
    trials = {t["params"]["x"]: t for t in _json(logdir, ".summary.json")["trials"]}
    assert trials[2]["error"].startswith("trial x=2: its process exited with exit code 3"), trials[2]["error"]
    (warning,) = [r.getMessage() for r in caplog.records if "trials failed" in r.getMessage()]
    path = warning.rsplit("see ", 1)[1]
    assert os.path.isabs(path) and os.path.isfile(path), warning


def test_launch_runs_in_a_child_process_too(spark, root):
    def ends_its_process():
        print("about to exit")
        os._exit(7)

    with pytest.raises(ExperimentFailed, match="exit code 7") as info:
        experiment.launch(ends_its_process, name="exits")
    assert "about to exit" in info.value.output_tail
    assert _json(info.value.logdir, "experiment.json")["state"] == "FAILED"
    with pytest.raises(ExperimentFailed, match="exit code 7"):
        experiment.launch(lambda x: os._exit(x), {"x": [7, 7]}, name="executions")
