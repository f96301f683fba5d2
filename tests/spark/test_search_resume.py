"""resume= on the batch searches (grid, random, differential evolution): the trials that ended are kept, the
ones that were running run again in their folders from their last checkpoint, the rest run as they would have."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hopsml import checkpoint, experiment
from hopsml.search.space import SearchSpaceError

HERE = os.path.dirname(os.path.abspath(__file__))


def _json(*parts):
    with open(os.path.join(*parts)) as f:
        return json.load(f)


def holding(folder):
    """A trial function that counts its runs in `folder`; x >= 3 saves a checkpoint and then waits while
    the hold file there exists."""
    def held(x):
        with open(os.path.join(folder, "runs.log"), "a") as f:
            f.write(f"{x}\n")
        restored = checkpoint.load()
        hold = os.path.join(folder, "hold")
        if x >= 3 and restored is None:
            checkpoint.save({"x": x}, 0)
            open(f"{hold}.{x}", "w").close()
            while os.path.exists(hold):
                time.sleep(0.2)
        return {"metric": -abs(x - 3), "resumed_at": restored[1] if restored else None}
    return held


DRIVER = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {HERE!r})
    from hopsml import experiment
    from test_search_resume import holding

    experiment.grid_search(holding(sys.argv[1]), {{"x": [1, 2, 3, 4]}}, name="resumable-grid")
""")


def _summary(root):
    found = list(root.glob("Projects/test/Experiments/*/.summary.json"))
    try:
        return {t["params"]["x"]: t for t in json.loads(found[0].read_text())["trials"]} if found else {}
    except (ValueError, KeyError):   # being replaced
        return {}


def _wait_for(condition, what, limit_s=300.0):
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.2)


def _runs(log):
    return sorted(int(line) for line in log.read_text().split())


def test_a_grid_search_whose_driver_was_killed_resumes_from_its_record(spark, root, tmp_path):
    hold, runs = tmp_path / "hold", tmp_path / "runs.log"
    hold.touch()
    held = holding(str(tmp_path))
    env = {**os.environ, "HOPSML_MASTER": "local[4]", "HOPSML_LOG_DIR": str(tmp_path / "logs")}
    (tmp_path / "driver.py").write_text(DRIVER)
    driver = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(tmp_path)], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(lambda: [_summary(root).get(x, {}).get("state") for x in (1, 2)] == ["FINISHED"] * 2
                  and (tmp_path / "hold.3").exists() and (tmp_path / "hold.4").exists(),
                  "two ended trials and two held ones")
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        before = _summary(root)
        (old_id,) = [p.parent.name for p in root.glob("Projects/test/Experiments/*/.summary.json")]
    finally:
        hold.unlink(missing_ok=True)
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert [before[x]["state"] for x in (3, 4)] == ["RUNNING", "RUNNING"]
    with pytest.raises(SearchSpaceError, match="same space"):
        experiment.grid_search(held, {"x": [1, 2, 3]}, resume=old_id)
    logdir, best, outputs = experiment.grid_search(held, {"x": [1, 2, 3, 4]}, resume=old_id, name="resumed")
    record = _json(logdir, "experiment.json")
    assert record["resumed_from"] == {"experiment": old_id, "trials": 4, "restarted": 2}
    assert _runs(runs) == [1, 2, 3, 3, 4, 4]   # the ended trials did not run again
    trials = {t["params"]["x"]: t for t in _json(logdir, ".summary.json")["trials"]}
    assert all(t["state"] == "FINISHED" for t in trials.values())
    assert [trials[x]["outputs"]["resumed_at"] for x in (1, 2, 3, 4)] == [None, None, 0, 0]   # from the checkpoint
    assert best == {"x": 3} and outputs["metric"] == 0
    for x in (1, 2):   # kept as they were, in the new run's folder
        assert trials[x]["outputs"] == before[x]["outputs"]
        assert os.path.exists(os.path.join(logdir, os.path.basename(trials[x]["dir"]), ".outputs.json"))


def counting(runs):
    def counted(x, y):
        with open(runs, "a") as f:
            f.write("1\n")
        return {"metric": -((x - 1) ** 2) - (y - 2) ** 2}
    return counted


@pytest.mark.parametrize("verb", ["random", "differential_evolution"])
def test_random_and_evolution_resume_the_trials_left_running(spark, root, tmp_path, verb):
    runs = tmp_path / "runs.log"
    counted = counting(str(runs))
    space = {"x": [-2.0, 3.0], "y": [0.0, 4.0]}

    def search(**kwargs):
        if verb == "random":
            return experiment.random_search(counted, space, samples=8, **kwargs)
        return experiment.differential_evolution(counted, space, population=4, generations=3, **kwargs)

    first, best, _ = search(seed=5, name="first")
    ran = len(_runs(runs))
    # what a driver killed during its last batch leaves: those trials RUNNING, without a metric
    summary_path = os.path.join(first, ".summary.json")
    summary = _json(summary_path)
    for trial in summary["trials"][-2:]:
        trial.update(state="RUNNING", metric=None, outputs={})
    with open(summary_path, "w") as f:
        json.dump(summary, f)
    old_id = _json(first, "experiment.json")["id"]
    again, best_again, _ = search(resume=old_id, name="again")
    assert len(_runs(runs)) == ran + 2   # only the two that were running ran again
    params = [t["params"] for t in _json(again, ".summary.json")["trials"]]
    assert params == [t["params"] for t in summary["trials"]]   # the same seed proposed the same trials
    assert best_again == best and _json(again, "experiment.json")["resumed_from"]["restarted"] == 2
    assert all(t["state"] == "FINISHED" for t in _json(again, ".summary.json")["trials"])
